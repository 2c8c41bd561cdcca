"""
Master: connects to slaves, sends them tasks and receives their heartbeats and task results over HTTP.
"""

import hmac
import logging
import threading
import time
from typing import Any

from flask import request

from ding.utils.tls import TlsSettings

from ..base.auth import check_secret
from ..base.common import check_channel, check_positive, check_retries, format_http_address, get_host_ip
from ..base.envelope import (
    ResponsibleException,
    get_object_field,
    get_string_field,
    parse_json_object,
    success_response,
)
from ..base.limits import HttpLimits
from ..base.server import PeerService, Route
from ..config import (
    DEFAULT_CHANNEL,
    DEFAULT_HEARTBEAT_CHECK_SPAN,
    DEFAULT_HEARTBEAT_TOLERANCE,
    DEFAULT_MASTER_PORT,
    DEFAULT_REQUEST_RETRIES,
    DEFAULT_REQUEST_RETRY_WAITING,
    DEFAULT_REQUEST_TIMEOUT,
    LOCAL_HOST,
    WILDCARD_HOSTS,
)
from ..exception import MasterErrorCode
from .connection import SlaveConnectionProxy
from .task import TaskStatus

logger = logging.getLogger(__name__)


class Master(PeerService):
    """
    Interaction master (e.g. the coordinator).

    Endpoints: ``GET /ping`` (anyone), ``DELETE /shutdown`` (``Token`` = ``self_token``), and for connected
    slaves (headers ``Channel`` and ``Token`` = the slave's token): ``GET /slave/heartbeat``,
    ``PUT /slave/task/complete`` and ``PUT /slave/task/fail`` with body ``{"task": {"id"}, "result": {...}}``.
    A slave whose last heartbeat is older than ``heartbeat_tolerance`` is dropped and its tasks fail.

    ``master.new_connection(name, host, port)`` gives a connection; ``name in master``, ``master[name]`` and
    ``del master[name]`` (disconnect) work on connected ones.
    """

    _role = 'master'
    _codes = MasterErrorCode

    def __init__(
        self,
        host: str | None = None,
        port: int | None = None,
        heartbeat_tolerance: float | None = DEFAULT_HEARTBEAT_TOLERANCE,
        heartbeat_check_span: float | None = DEFAULT_HEARTBEAT_CHECK_SPAN,
        request_retries: int | None = DEFAULT_REQUEST_RETRIES,
        request_retry_waiting: float | None = DEFAULT_REQUEST_RETRY_WAITING,
        channel: int | None = DEFAULT_CHANNEL,
        my_address: str | None = None,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        disable_flask_log: bool = True,
        secret: str | None = None,
        limits: HttpLimits | None = None,
        tls: TlsSettings | None = None,
    ):
        """
        ``host``/``port``: where to listen (None: 127.0.0.1 and 7235; port 0 picks a free port, see ``.port``).
        ``heartbeat_tolerance``: seconds without heartbeat before a slave is dropped; ``heartbeat_check_span``:
        seconds between checks (also the resolution of task timeouts). ``request_retries``/``request_retry_waiting``:
        extra attempts and the pause between them for requests to slaves (connection errors/5xx only).
        ``channel``: must equal the slaves'. ``my_address``: host slaves call back (default: ``host``, or for a
        wildcard host the outbound IP, or 127.0.0.1 without a route). ``request_timeout``: seconds per request.
        ``disable_flask_log``: drop werkzeug's per-request access log. None means the default for any argument.
        ``secret``: the run secret proven to every slave on connect (and required back from it); None: no proof.
        ``limits``: the server's bounds (``system.http``). ``tls``: serve HTTPS only and reach slaves over HTTPS
        only, trusting the certificates ``tls.ca_file`` signed (``system.tls``).
        """
        host = LOCAL_HOST if host is None else host
        super().__init__(host, DEFAULT_MASTER_PORT if port is None else port, disable_flask_log, limits, tls)
        self._heartbeat_tolerance = check_positive(
            'heartbeat_tolerance', DEFAULT_HEARTBEAT_TOLERANCE if heartbeat_tolerance is None else heartbeat_tolerance
        )
        self._heartbeat_check_span = check_positive(
            'heartbeat_check_span',
            DEFAULT_HEARTBEAT_CHECK_SPAN if heartbeat_check_span is None else heartbeat_check_span,
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
        if my_address is not None and (not isinstance(my_address, str) or not my_address):
            raise ValueError(f'my_address must be a non-empty host string or None, got {my_address!r}')
        if my_address is None:
            my_address = get_host_ip() if host in WILDCARD_HOSTS else host
        self._my_address = my_address
        self._secret = check_secret(secret, "the master's secret argument") if secret is not None else None

        self._lock = threading.RLock()
        self._pending_cond = threading.Condition(self._lock)
        self._pending_connects = 0
        self._connections: dict[str, SlaveConnectionProxy] = {}
        self._by_slave_token: dict[str, SlaveConnectionProxy] = {}
        self._checker_thread: threading.Thread | None = None

    # --- properties -------------------------------------------------------------------------------------
    @property
    def channel(self) -> int:
        return self._channel

    @property
    def my_address(self) -> str:
        """Host that slaves use to call this master back."""
        return self._my_address

    @property
    def address(self) -> str:
        """``http(s)://my_address:port``, the callback address sent to slaves at connect time."""
        return format_http_address(self._my_address, self.port, self.tls is not None)

    @property
    def heartbeat_tolerance(self) -> float:
        return self._heartbeat_tolerance

    @property
    def request_retries(self) -> int:
        """Extra attempts of a request to a slave (connection errors / 5xx only)."""
        return self._request_retries

    @property
    def request_retry_waiting(self) -> float:
        return self._request_retry_waiting

    @property
    def request_timeout(self) -> float:
        """Seconds one request to a slave may take."""
        return self._request_timeout

    @property
    def lock(self) -> threading.RLock:
        """Guards the table of connections and the state of every connection (``SlaveConnectionProxy``)."""
        return self._lock

    # --- connections ------------------------------------------------------------------------------------
    def new_connection(self, name: str, host: str, port: int) -> SlaveConnectionProxy:
        """A (not yet connected) connection to the slave at ``host:port``, known as ``name`` once connected."""
        if not isinstance(name, str) or not name:
            raise ValueError(f'connection name must be a non-empty string, got {name!r}')
        if not isinstance(host, str) or not host:
            raise ValueError(f'slave host must be a non-empty string, got {host!r}')
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port <= 65535:
            raise ValueError(f'slave port must be an int in [1, 65535], got {port!r}')
        with self._lock:
            if name in self._connections:
                raise ValueError(f'master already has a connected slave named {name!r}; disconnect it first')
        return SlaveConnectionProxy(self, name, host, port, secret=self._secret)

    def __contains__(self, name: str) -> bool:
        with self._lock:
            return name in self._connections

    def __getitem__(self, name: str) -> SlaveConnectionProxy:
        with self._lock:
            try:
                return self._connections[name]
            except KeyError:
                raise KeyError(f'no connected slave named {name!r}; connected: {sorted(self._connections)}') from None

    def __delitem__(self, name: str) -> None:
        self[name].disconnect()

    def __iter__(self):
        with self._lock:
            return iter(list(self._connections))

    def __len__(self) -> int:
        with self._lock:
            return len(self._connections)

    # --- used by SlaveConnectionProxy (this package); callers hold ``lock`` where it says so ---------------
    def check_running(self) -> None:
        """Raise ``RuntimeError`` unless the master is started and not shut down."""
        if self._server is None:
            raise RuntimeError('master is not started; call start() first')
        if self._stopping.is_set():
            raise RuntimeError('master is shut down')

    def begin_connect(self, conn: SlaveConnectionProxy) -> None:
        """A connection starts its ``/connect`` (under ``lock``): refused when its name is taken by another."""
        other = self._connections.get(conn.name)
        if other is not None and other is not conn:
            raise ValueError(f'master already has a connected slave named {conn.name!r}; disconnect it first')
        self._pending_connects += 1

    def end_connect(self) -> None:
        """A ``/connect`` ended, kept or not (under ``lock``): wakes the callbacks waiting for its token."""
        self._pending_connects -= 1
        self._pending_cond.notify_all()

    def add_connection(self, conn: SlaveConnectionProxy, slave_token: str) -> None:
        """Register a connected slave under its name and token (under ``lock``)."""
        self._connections[conn.name] = conn
        self._by_slave_token[slave_token] = conn

    def remove_connection(self, conn: SlaveConnectionProxy, slave_token: str | None) -> None:
        """Forget a dropped connection (under ``lock``); entries since taken by another connection stay."""
        if self._connections.get(conn.name) is conn:
            del self._connections[conn.name]
        if slave_token is not None and self._by_slave_token.get(slave_token) is conn:
            del self._by_slave_token[slave_token]

    # --- service plumbing -------------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        return [
            ('/ping', ['GET'], self._api_ping),
            ('/shutdown', ['DELETE'], self._api_shutdown),
            ('/slave/heartbeat', ['GET'], self._api_heartbeat),
            ('/slave/task/complete', ['PUT'], self._api_task_complete),
            ('/slave/task/fail', ['PUT'], self._api_task_fail),
        ]

    def _start_workers(self) -> None:
        self._checker_thread = threading.Thread(target=self._check_loop, name=self._thread_name('checker'), daemon=True)
        self._checker_thread.start()

    def _stop_workers(self) -> None:
        with self._lock:
            connections = list(self._connections.values())
        for conn in connections:
            conn.close(f'master is shutting down; connection {conn.name!r} was closed')

    def _worker_threads(self) -> list[threading.Thread]:
        return [self._checker_thread] if self._checker_thread is not None else []

    def _check_loop(self) -> None:
        """Drop slaves that stopped sending heartbeats and fail tasks past their timeout."""
        while not self._stopping.wait(self._heartbeat_check_span):
            now = time.monotonic()
            with self._lock:
                connections = list(self._connections.values())
            for conn in connections:
                age = conn.heartbeat_age(now)
                if age > self._heartbeat_tolerance:
                    logger.warning(
                        'slave %r at %s:%s lost: no heartbeat for %.1fs', conn.name, conn.host, conn.port, age
                    )
                    conn.drop(
                        f'slave {conn.name!r} at {conn.host}:{conn.port} sent no heartbeat for {age:.1f}s '
                        f'(tolerance {self._heartbeat_tolerance}s), connection dropped'
                    )
                    continue
                for task in conn.expired_tasks(now):
                    if conn.pop_task(task.id) is task:
                        task.finish(
                            TaskStatus.TASK_FAILED,
                            {
                                'message': f'task {task.id} timed out: no answer from slave {conn.name!r} '
                                f'within {task.timeout}s'
                            },
                        )

    # --- endpoints --------------------------------------------------------------------------------------
    def _check_slave(self) -> SlaveConnectionProxy:
        """Checks of every slave callback; returns the connection whose token the request carries."""
        self._check_not_shutting_down()
        self._check_channel_header(self._channel)
        token = request.headers.get('Token')
        if not token:
            raise ResponsibleException(MasterErrorCode.SLAVE_TOKEN_NOT_GIVEN, 'Header "Token" is required.')
        with self._pending_cond:
            conn = self._find_by_token(token)
            if conn is None and self._pending_connects:
                # A slave may call (heartbeat) before we have read its /connect answer: wait for that.
                self._pending_cond.wait_for(
                    lambda: self._find_by_token(token) is not None or not self._pending_connects,
                    timeout=self._request_timeout,
                )
                conn = self._find_by_token(token)
        if conn is None:
            raise ResponsibleException(
                MasterErrorCode.SLAVE_TOKEN_NOT_MATCH, 'Token does not belong to a slave connected to this master.'
            )
        return conn

    def _find_by_token(self, token: str) -> SlaveConnectionProxy | None:
        # Compare in constant time: the token authenticates the slave.
        for known, conn in self._by_slave_token.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return conn
        return None

    def _api_heartbeat(self) -> dict[str, Any]:
        conn = self._check_slave()
        conn.record_heartbeat()
        return success_response(message='Heartbeat received.')

    def _read_task_report(self) -> Any:
        conn = self._check_slave()
        body = parse_json_object(request.get_data(), MasterErrorCode.REQUEST_INVALID)
        task_info = get_object_field(body, 'task', MasterErrorCode.TASK_DATA_INVALID)
        task_id = get_string_field(task_info, 'id', MasterErrorCode.TASK_DATA_INVALID)
        result = get_object_field(body, 'result', MasterErrorCode.TASK_DATA_INVALID, required=False)
        task = conn.pop_task(task_id)
        if task is None:
            raise ResponsibleException(
                MasterErrorCode.TASK_NOT_EXIST,
                f'No task {task_id!r} in flight on connection {conn.name!r} (unknown, finished or timed out).',
            )
        return task, result

    def _api_task_complete(self) -> dict[str, Any]:
        task, result = self._read_task_report()
        task.finish(TaskStatus.TASK_COMPLETED, result)
        return success_response(message='Task completion received.')

    def _api_task_fail(self) -> dict[str, Any]:
        task, result = self._read_task_report()
        result.setdefault('message', 'task failed on the slave')
        task.finish(TaskStatus.TASK_FAILED, result)
        return success_response(message='Task failure received.')
