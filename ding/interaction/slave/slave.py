"""
Slave: an HTTP server that accepts one master at a time, runs its tasks asynchronously and reports
results back, sending heartbeats to the master while connected. Subclass it and implement ``_process_task``.
Beside it: ``hooks`` (what a subclass overrides), ``connect_gate`` (the run secret's check on ``/connect``),
``task_outcome`` (what is reported of a task).
"""

import hmac
import logging
import ssl
import threading
from collections.abc import Mapping
from typing import Any

import requests
from flask import request

from ding.utils.tls import TlsSettings

from ..base.client import HttpClient
from ..base.common import (
    check_channel,
    check_positive,
    check_retries,
    format_http_address,
    random_token,
    split_http_address,
)
from ..base.envelope import (
    ResponsibleException,
    check_json_serializable,
    get_object_field,
    get_string_field,
    parse_json_object,
    success_response,
)
from ..base.limits import HttpLimits
from ..base.server import PeerService, Route
from ..config import (
    DEFAULT_CHANNEL,
    DEFAULT_HEARTBEAT_SPAN,
    DEFAULT_REQUEST_RETRIES,
    DEFAULT_REQUEST_RETRY_WAITING,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SLAVE_PORT,
    LOCAL_HOST,
)
from ..exception import SlaveErrorCode, get_master_exception_by_error
from .action import ConnectionRefuse, DisconnectionRefuse
from .connect_gate import REFUSAL_LOG_SPAN as REFUSAL_LOG_SPAN  # its old home
from .connect_gate import ConnectGate
from .hooks import SlaveHooks
from .task_outcome import task_outcome

logger = logging.getLogger(__name__)


class _MasterLink:
    """State of the current connection: the master's token (it must send), ours (we send) and its address."""

    def __init__(self, address: str, master_token: str, slave_token: str, client: HttpClient):
        self.address = address
        self.master_token = master_token
        self.slave_token = slave_token
        self.client = client


class Slave(SlaveHooks, PeerService):
    """
    Interaction slave (e.g. a learner or collector process).

    Endpoints: ``POST /connect``, ``DELETE /disconnect``, ``POST /task/new`` (master, with headers
    ``Channel`` and ``Token``), ``GET /ping`` (anyone), ``DELETE /shutdown`` (``Token`` = ``self_token``).
    One task runs at a time, in its own thread; ``/task/new`` answers as soon as the task is accepted and
    the result goes to the master's ``/slave/task/complete`` or ``/slave/task/fail``.

    Hooks for subclasses (``SlaveHooks``): ``_before_connection``, ``_after_connection``, ``_before_disconnection``,
    ``_after_disconnection``, ``_before_task``, ``_process_task`` (required), ``_lost_connection``.
    """

    _role = 'slave'
    _codes = SlaveErrorCode

    def __init__(
        self,
        host: str | None = None,
        port: int | None = None,
        heartbeat_span: float | None = DEFAULT_HEARTBEAT_SPAN,
        request_retries: int | None = DEFAULT_REQUEST_RETRIES,
        request_retry_waiting: float | None = DEFAULT_REQUEST_RETRY_WAITING,
        channel: int | None = DEFAULT_CHANNEL,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        disable_flask_log: bool = True,
        secret: str | None = None,
        limits: HttpLimits | None = None,
        tls: TlsSettings | None = None,
    ):
        """
        ``host``/``port``: where to listen (None: 127.0.0.1 and 7236; port 0 picks a free port, see ``.port``).
        ``heartbeat_span``: seconds between heartbeats to the master. ``request_retries``/``request_retry_waiting``:
        extra attempts and the pause between them for requests to the master (connection errors/5xx only).
        ``channel``: must equal the master's. ``request_timeout``: seconds per HTTP request.
        ``disable_flask_log``: drop werkzeug's per-request access log. None means the default for any argument.
        ``secret``: the run secret a master must prove on ``/connect`` before its body is read
        (``ding.interaction.base.auth``); None accepts any master (library use; the parallel workers pass one).
        ``limits``: the server's bounds (``system.http``). ``tls``: serve HTTPS only, and call back only a master
        whose address is ``https://`` and whose certificate ``tls.ca_file`` signed (``system.tls``).
        """
        super().__init__(
            LOCAL_HOST if host is None else host,
            DEFAULT_SLAVE_PORT if port is None else port,
            disable_flask_log,
            limits=limits,
            tls=tls,
        )
        self._heartbeat_span = check_positive(
            'heartbeat_span', DEFAULT_HEARTBEAT_SPAN if heartbeat_span is None else heartbeat_span
        )
        self._request_retries = DEFAULT_REQUEST_RETRIES if request_retries is None else request_retries
        self._request_retry_waiting = (
            DEFAULT_REQUEST_RETRY_WAITING if request_retry_waiting is None else request_retry_waiting
        )
        check_retries(self._request_retries, self._request_retry_waiting)
        self._request_timeout = check_positive(
            'request_timeout', DEFAULT_REQUEST_TIMEOUT if request_timeout is None else request_timeout
        )
        self._channel = check_channel(DEFAULT_CHANNEL if channel is None else channel)
        self._gate = ConnectGate(secret)

        self._link: _MasterLink | None = None
        self._link_lock = threading.Lock()
        self._task_lock = threading.Lock()
        self._task_id: str | None = None
        self._task_thread: threading.Thread | None = None
        self._heartbeat_thread: threading.Thread | None = None

    # --- properties -------------------------------------------------------------------------------------
    @property
    def channel(self) -> int:
        return self._channel

    @property
    def requires_secret(self) -> bool:
        """Whether ``/connect`` needs a proof of the run secret."""
        return self._gate.requires_secret

    @property
    def is_connected(self) -> bool:
        return self._link is not None

    @property
    def master_address(self) -> str | None:
        """``http://host:port`` of the connected master, None when not connected."""
        link = self._link
        return link.address if link is not None else None

    @property
    def current_task_id(self) -> str | None:
        """Id of the task being processed, None when idle."""
        return self._task_id

    # --- service plumbing -------------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        return [
            ('/connect', ['POST'], self._api_connect),
            ('/disconnect', ['DELETE'], self._api_disconnect),
            ('/task/new', ['POST'], self._api_new_task),
            ('/ping', ['GET'], self._api_ping),
            ('/shutdown', ['DELETE'], self._api_shutdown),
        ]

    def _start_workers(self) -> None:
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat_loop, name=self._thread_name('heartbeat'), daemon=True
        )
        self._heartbeat_thread.start()

    def _worker_threads(self) -> list[threading.Thread]:
        return [t for t in (self._heartbeat_thread, self._task_thread) if t is not None]

    # --- request checks ---------------------------------------------------------------------------------
    def _master_token_header(self) -> str:
        token = request.headers.get('Token')
        if not token:
            raise ResponsibleException(SlaveErrorCode.MASTER_TOKEN_NOT_GIVEN, 'Header "Token" is required.')
        return token

    def _check_master(self) -> _MasterLink:
        """Checks of every request from the connected master; returns the link it belongs to."""
        self._check_not_shutting_down()
        self._check_channel_header(self._channel)
        token = self._master_token_header()
        link = self._link
        if link is None:
            raise ResponsibleException(SlaveErrorCode.SLAVE_NOT_CONNECTED, 'This slave is not connected.')
        if not hmac.compare_digest(token.encode(), link.master_token.encode()):
            raise ResponsibleException(
                SlaveErrorCode.MASTER_TOKEN_NOT_MATCH, 'Token does not match the connected master.'
            )
        return link

    def _call_hook(self, hook: Any, *args: Any) -> None:
        """Run an ``_after_*``/``_lost_connection`` hook; its errors are logged, never sent to the master."""
        try:
            hook(*args)
        except Exception:
            logger.exception('%s.%s raised', type(self).__name__, getattr(hook, '__name__', hook))

    # --- endpoints --------------------------------------------------------------------------------------
    def _refuse_if_connected(self) -> None:
        link = self._link
        if link is not None:
            raise ResponsibleException(
                SlaveErrorCode.SLAVE_ALREADY_CONNECTED, f'This slave is already connected to master {link.address}.'
            )

    def _api_connect(self) -> dict[str, Any]:
        # Every check that needs no body comes first: an unauthenticated or unwanted request is never parsed.
        self._check_not_shutting_down()
        nonce = self._gate.check(self.port, self)
        self._check_channel_header(self._channel)
        master_token = self._master_token_header()
        self._refuse_if_connected()
        body = parse_json_object(request.get_data(), SlaveErrorCode.REQUEST_INVALID)
        master_info = get_object_field(body, 'master', SlaveErrorCode.REQUEST_INVALID)
        address = get_string_field(master_info, 'address', SlaveErrorCode.REQUEST_INVALID)
        try:
            master_host, master_port, https = split_http_address(address)
        except ValueError as err:
            raise ResponsibleException(SlaveErrorCode.REQUEST_INVALID, str(err)) from None
        data = get_object_field(body, 'data', SlaveErrorCode.REQUEST_INVALID, required=False)
        callback_tls = self._callback_tls(https)

        with self._link_lock:
            self._refuse_if_connected()
            try:
                reply = self._before_connection(data)
            except ConnectionRefuse as err:
                self._call_hook(self._after_connection, err.status_code, False, int(err.code), err.message, err.data)
                raise
            reply = self._check_hook_reply(reply, '_before_connection')
            slave_token = random_token()
            client = HttpClient(
                master_host,
                master_port,
                {'Channel': str(self._channel), 'Token': slave_token},
                get_master_exception_by_error,
                retries=self._request_retries,
                retry_waiting=self._request_retry_waiting,
                timeout=self._request_timeout,
                tls=callback_tls,
            )
            self._link = _MasterLink(
                format_http_address(master_host, master_port, https), master_token, slave_token, client
            )
        logger.info('slave %s connected to master %s', self, address)
        self._call_hook(self._after_connection, 200, True, int(SlaveErrorCode.SUCCESS), 'Connected.', reply)
        answer: dict[str, Any] = {'token': slave_token, 'data': reply}
        if nonce is not None:
            answer['proof'] = self._gate.accept_proof(nonce, slave_token)
        return success_response(answer, 'Connected.')

    def _callback_tls(self, https: bool) -> ssl.SSLContext | None:
        """The client context for calls to a master at an ``https`` (or plain) address. A slave serving TLS calls
        back over TLS only, trusting its own CA: a plain address would send the link's token in clear."""
        if self.tls_client_context is not None:
            if not https:
                raise ResponsibleException(
                    SlaveErrorCode.REQUEST_INVALID,
                    'This slave uses TLS: the master address must be https://, so that its token is not sent in clear.',
                )
            return self.tls_client_context
        return ssl.create_default_context() if https else None

    def _api_disconnect(self) -> dict[str, Any]:
        link = self._check_master()
        body = parse_json_object(request.get_data(), SlaveErrorCode.REQUEST_INVALID, allow_empty=True)
        data = get_object_field(body, 'data', SlaveErrorCode.REQUEST_INVALID, required=False)
        with self._link_lock:
            if self._link is not link:
                raise ResponsibleException(
                    SlaveErrorCode.MASTER_TOKEN_NOT_MATCH, 'Token does not match the connected master.'
                )
            try:
                reply = self._before_disconnection(data)
            except DisconnectionRefuse as err:
                self._call_hook(self._after_disconnection, err.status_code, False, int(err.code), err.message, err.data)
                raise
            reply = self._check_hook_reply(reply, '_before_disconnection')
            self._link = None
        logger.info('slave %s disconnected from master %s', self, link.address)
        self._call_hook(self._after_disconnection, 200, True, int(SlaveErrorCode.SUCCESS), 'Disconnected.', reply)
        return success_response({'data': reply}, 'Disconnected.')

    def _api_new_task(self) -> dict[str, Any]:
        link = self._check_master()
        body = parse_json_object(request.get_data(), SlaveErrorCode.REQUEST_INVALID)
        task_info = get_object_field(body, 'task', SlaveErrorCode.TASK_DATA_INVALID)
        task_id = get_string_field(task_info, 'id', SlaveErrorCode.TASK_DATA_INVALID)
        data = get_object_field(body, 'data', SlaveErrorCode.TASK_DATA_INVALID)
        with self._task_lock:
            if self._task_id is not None:
                raise ResponsibleException(
                    SlaveErrorCode.TASK_ALREADY_EXIST,
                    f'This slave is busy with task {self._task_id} (one task at a time).',
                )
            self._before_task(data)  # TaskRefuse propagates as the answer
            thread = threading.Thread(
                target=self._run_task, args=(task_id, data, link), name=self._thread_name('task'), daemon=True
            )
            self._task_id, self._task_thread = task_id, thread
            thread.start()
        return success_response({'task': {'id': task_id}}, 'Task accepted.')

    # --- task execution ---------------------------------------------------------------------------------
    def _run_task(self, task_id: str, data: dict[str, Any], link: _MasterLink) -> None:
        kind, result = task_outcome(self._process_task, data, task_id, type(self).__name__)

        # Free the slot before reporting: the master may send the next task from its completion callback.
        with self._task_lock:
            self._task_id = None
        if self._link is not link:
            logger.info('result of task %s dropped: the master that sent it is no longer connected', task_id)
            return
        try:
            link.client.request(
                'PUT', '/slave/task/' + kind, {'task': {'id': task_id}, 'result': result}, abort=self._stopping
            )
        except requests.RequestException as err:
            logger.warning('could not report task %s to master %s: %s', task_id, link.address, err)

    # --- heartbeat --------------------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._stopping.wait(self._heartbeat_span):
            link = self._link
            if link is None:
                continue
            try:
                link.client.request('GET', '/slave/heartbeat', abort=self._stopping, idempotent=True)
            except requests.RequestException as err:
                if self._stopping.is_set():
                    break
                with self._link_lock:
                    if self._link is not link:
                        continue
                    # The master dropped us or is gone: free the slave so that a master can connect again.
                    self._link = None
                logger.warning('slave %s lost master %s: %s', self, link.address, err)
                self._call_hook(self._lost_connection, link.address, err)

    def _check_hook_reply(self, reply: Any, hook: str) -> dict[str, Any]:
        if reply is None:
            return {}
        if not isinstance(reply, Mapping):
            raise ResponsibleException(
                SlaveErrorCode.UNKNOWN_ERROR,
                f'{type(self).__name__}.{hook} must return a dict or None, got {type(reply).__name__}.',
            )
        reply = dict(reply)
        check_json_serializable(reply, f'{type(self).__name__}.{hook} result', SlaveErrorCode.UNKNOWN_ERROR)
        return reply
