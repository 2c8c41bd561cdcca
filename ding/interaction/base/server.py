"""
Serving a Flask app from a werkzeug server object owned by the code (not ``app.run``), in a background
thread: ``start()`` returns once the socket listens, ``shutdown()`` stops serving, ``join()`` waits.

Every server is bounded against slow or hostile clients (``limits.HttpLimits``): a body's size is checked from
its Content-Length before it is read (chunked bodies are refused), JSON nesting is bounded, each connection must
progress within a read timeout, and at most ``max_connections`` are served at once (more get 503, closed).
Given ``TlsSettings`` (``system.tls``), a server speaks HTTPS only.
"""

import hmac
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Collection, Sequence
from enum import IntEnum
from typing import Any, Protocol

import requests
from flask import Flask, Response, request
from werkzeug.exceptions import ClientDisconnected, HTTPException
from werkzeug.serving import BaseWSGIServer

from ding.utils.tls import TlsSettings

from .. import config
from .common import connectable_host, format_http_address, random_token
from .envelope import ResponsibleException, failure_response, success_response
from .limits import BoundedWSGIServer, HttpLimits, busy_answer, check_body_framing, request_handler

logger = logging.getLogger(__name__)

# (rule, methods, view); a view returns a success envelope dict or raises ResponsibleException.
Route = tuple[str, Sequence[str], Callable[[], dict[str, Any]]]


class ErrorCodes(Protocol):
    """The enum of codes an ``HttpService`` answers with (``MasterErrorCode``, ``SlaveErrorCode``, the run
    service's): the codes this module uses."""

    @property
    def ROUTE_NOT_FOUND(self) -> IntEnum: ...

    @property
    def METHOD_NOT_ALLOWED(self) -> IntEnum: ...

    @property
    def REQUEST_INVALID(self) -> IntEnum: ...

    @property
    def UNKNOWN_ERROR(self) -> IntEnum: ...

    @property
    def SYSTEM_SHUTTING_DOWN(self) -> IntEnum: ...


class PeerErrorCodes(ErrorCodes, Protocol):
    """The codes of a ``PeerService`` (master or slave): also the channel and self-token checks'."""

    @property
    def CHANNEL_NOT_GIVEN(self) -> IntEnum: ...

    @property
    def CHANNEL_NOT_MATCH(self) -> IntEnum: ...

    @property
    def SELF_TOKEN_NOT_GIVEN(self) -> IntEnum: ...

    @property
    def SELF_TOKEN_NOT_MATCH(self) -> IntEnum: ...


def _json_response(envelope: dict[str, Any], status: int) -> Response:
    return Response(json.dumps(envelope), status=status, mimetype='application/json')


def build_app(
    import_name: str,
    routes: Sequence[Route],
    codes: ErrorCodes,
    data_routes: Collection[str] = (),
    limits: HttpLimits | None = None,
) -> Flask:
    """
    A Flask app serving ``routes`` where every answer, errors included (unknown route, wrong method, too large,
    unexpected exception), is a JSON envelope with a code from ``codes`` (MasterErrorCode/SlaveErrorCode).
    Bodies of ``data_routes`` may reach ``limits.data_body_bytes``, those of the others
    ``limits.control_body_bytes`` (default ``HttpLimits()``).
    """
    limits = HttpLimits() if limits is None else limits
    app = Flask(import_name)
    app.config['MAX_CONTENT_LENGTH'] = max(limits.data_body_bytes, limits.control_body_bytes)

    def _wrap(view: Callable[[], dict[str, Any]], limit: int) -> Callable[[], Response]:

        def _view() -> Response:
            try:
                check_body_framing(limit, codes)
                envelope = view()
            except ResponsibleException as err:
                return _json_response(err.get_response(), err.status_code)
            return _json_response(envelope, 200)

        return _view

    for rule, methods, view in routes:
        app.add_url_rule(
            rule,
            endpoint=rule,
            view_func=_wrap(view, limits.data_body_bytes if rule in data_routes else limits.control_body_bytes),
            methods=list(methods),
            provide_automatic_options=False,
        )

    def _http_error(err: HTTPException) -> Response:
        status = err.code or 500
        if isinstance(err, ClientDisconnected):
            # werkzeug's stream ends a body that stopped arriving (closed, or stalled past the read timeout).
            status, code, message = 408, codes.REQUEST_INVALID, 'Request body was not received in full in time.'
        elif status == 404:
            code, message = codes.ROUTE_NOT_FOUND, f'No route {request.method} {request.path}.'
        elif status == 405:
            code, message = codes.METHOD_NOT_ALLOWED, f'Method {request.method} is not allowed on {request.path}.'
        elif status < 500:
            code, message = codes.REQUEST_INVALID, err.description or err.name
        else:
            code, message = codes.UNKNOWN_ERROR, err.description or err.name
        response = _json_response(failure_response(code, message), status)
        allowed = getattr(err, 'valid_methods', None)  # set on MethodNotAllowed only
        if status == 405 and allowed:
            response.headers['Allow'] = ', '.join(allowed)
        return response

    def _unexpected_error(err: Exception) -> Response:
        logger.exception('unexpected error while serving %s %s', request.method, request.path)
        message = f'Unexpected server error: {type(err).__name__}: {err}'
        return _json_response(failure_response(codes.UNKNOWN_ERROR, message), 500)

    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    return app


def listen_socket(host: str, port: int) -> socket.socket:
    """
    A socket bound to ``host:port`` and listening. Done here rather than by werkzeug, which prints to
    stderr and calls ``sys.exit`` when the port is taken; here that is an ``OSError`` naming the address.
    """
    family = socket.AF_INET6 if ':' in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise OSError(err.errno, f'cannot listen on {host}:{port}: {err.strerror}') from None
    return sock


class HttpService:
    """
    Base of the HTTP servers (``PeerService``: Master and Slave; the run service): owns the HTTP server and its
    thread, a stop flag for worker threads and the service's own token (needed for ``DELETE /shutdown`` over
    HTTP). One-shot: start once, shut down once. ``limits`` bound what clients may cost (default
    ``HttpLimits()``); with ``tls`` the server speaks HTTPS only.
    Subclasses give ``_routes()`` and may override ``_start_workers``/``_stop_workers``/``_worker_threads``.
    """

    _role = 'service'
    _codes: ErrorCodes

    # Routes whose bodies carry data (up to limits.data_body_bytes); every other route is a control route.
    _data_routes: frozenset[str] = frozenset()

    def __init__(
        self,
        host: str,
        port: int,
        disable_flask_log: bool = True,
        limits: HttpLimits | None = None,
        tls: TlsSettings | None = None,
    ):
        if not isinstance(host, str):
            raise TypeError(f'host must be a string, got {host!r}')
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f'port must be an int in [0, 65535] (0 picks a free port), got {port!r}')
        if limits is not None and not isinstance(limits, HttpLimits):
            raise TypeError(f'limits must be an HttpLimits or None, got {type(limits).__name__}')
        if tls is not None and not isinstance(tls, TlsSettings):
            raise TypeError(f'tls must be a TlsSettings or None, got {type(tls).__name__}')
        self._host = host
        self._port = port
        self._disable_flask_log = disable_flask_log
        self._limits = HttpLimits() if limits is None else limits
        self._tls = tls
        # What this service's own requests to its peers trust (the run's CA); built once, shared by its threads.
        self._tls_client_context = tls.client_context() if tls is not None else None
        self._self_token = random_token()
        self._server: BaseWSGIServer | None = None
        self._server_thread: threading.Thread | None = None
        self._service_lock = threading.Lock()
        self._stopping = threading.Event()
        self._stopped = threading.Event()

    # --- for subclasses -------------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        raise NotImplementedError

    def _build_app(self) -> Flask:
        """The app served; subclasses may mount more routes on it (before the first request can arrive)."""
        return build_app(__name__, self._routes(), self._codes, self._data_routes, self._limits)

    def _start_workers(self) -> None:
        """Start background threads (called once the server listens)."""

    def _stop_workers(self) -> None:
        """Wind down (called after the stop flag is set, before the server stops serving)."""

    def _worker_threads(self) -> list[threading.Thread]:
        """Threads that ``join()`` waits for besides the server thread."""
        return []

    def _check_not_shutting_down(self) -> None:
        if self._stopping.is_set():
            raise ResponsibleException(self._codes.SYSTEM_SHUTTING_DOWN, f'This {self._role} is shutting down.')

    def _api_ping(self) -> dict[str, Any]:
        return success_response({'role': self._role}, 'PONG!')

    def _thread_name(self, what: str) -> str:
        return f'ding-{self._role}-{what}-{self.port}'

    # --- public ---------------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        """The port served on (the OS-chosen one after ``start()`` when configured with 0)."""
        return self._server.port if self._server is not None else self._port

    @property
    def limits(self) -> HttpLimits:
        return self._limits

    @property
    def tls(self) -> TlsSettings | None:
        """The TLS files served with (None: plain HTTP)."""
        return self._tls

    @property
    def tls_client_context(self) -> ssl.SSLContext | None:
        """The client context of this service's requests to its peers (trusts ``tls.ca_file``); None without TLS."""
        return self._tls_client_context

    @property
    def self_token(self) -> str:
        """Token that ``DELETE /shutdown`` requires in its ``Token`` header."""
        return self._self_token

    @property
    def is_running(self) -> bool:
        return self._server is not None and not self._stopping.is_set()

    def start(self) -> None:
        """Bind and listen (returns once the socket accepts connections), then serve in a background thread."""
        with self._service_lock:
            if self._server is not None or self._stopping.is_set():
                raise RuntimeError(f'{type(self).__name__} can only be started once')
            app = self._build_app()
            handler = request_handler(self._disable_flask_log, self._limits.read_timeout)
            tls_context = self._tls.server_context() if self._tls is not None else None
            sock = listen_socket(self._host, self._port)
            try:
                self._server = BoundedWSGIServer(
                    self._host,
                    sock.getsockname()[1],
                    app,
                    handler=handler,
                    fd=sock.fileno(),
                    max_connections=self._limits.max_connections,
                    busy_answer=busy_answer(self._codes, self._limits.max_connections),
                    tls_context=tls_context,
                )
            finally:
                sock.close()  # the server holds its own duplicate of the socket
            self._server_thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={'poll_interval': config.SERVE_POLL_INTERVAL},
                name=self._thread_name('http'),
                daemon=True,
            )
            self._server_thread.start()
        self._start_workers()

    def shutdown(self) -> None:
        """Stop serving and signal worker threads to end. Idempotent; use ``join()`` to wait for them."""
        with self._service_lock:
            if self._stopping.is_set():
                return
            self._stopping.set()
        try:
            self._stop_workers()
        finally:
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
            self._stopped.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait until shut down and every service thread has ended (``timeout`` bounds the wait for each)."""
        if not self._stopped.wait(timeout):
            return
        current = threading.current_thread()
        for thread in [self._server_thread] + self._worker_threads():
            if thread is not None and thread is not current and thread.ident is not None:
                thread.join(timeout)

    def close(self) -> None:
        """``shutdown()`` then ``join()``; safe to call any number of times, also before ``start()``."""
        self.shutdown()
        self.join()

    def ping(self, timeout: float = 2.0) -> bool:
        """Whether this service's own HTTP server answers ``GET /ping``."""
        if self._server is None:
            return False
        url = format_http_address(connectable_host(self._host), self.port, self._tls is not None) + '/ping'
        try:
            with requests.Session() as session:
                session.trust_env = False
                if self._tls is not None:
                    session.verify = self._tls.ca_file
                response = session.get(url, timeout=timeout)
            return response.status_code == 200 and response.json().get('success') is True
        except (requests.RequestException, ValueError):
            return False

    def __enter__(self) -> 'HttpService':
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self._host}:{self.port})'


class PeerService(HttpService):
    """Base of Master and Slave: an ``HttpService`` whose callers name the channel, and that can be shut down
    over HTTP (``DELETE /shutdown`` with its own token)."""

    _codes: PeerErrorCodes
    # The peer protocol's routes that carry task data: a new task (master -> slave) and a task report (slave ->
    # master). Both check the caller's token before reading the body.
    _data_routes = frozenset({'/task/new', '/slave/task/complete', '/slave/task/fail'})

    def _check_channel_header(self, channel: int) -> None:
        raw = request.headers.get('Channel')
        if raw is None or raw == '':
            raise ResponsibleException(self._codes.CHANNEL_NOT_GIVEN, 'Header "Channel" is required.')
        try:
            given = int(raw)
        except ValueError:
            given = None
        if given != channel:
            raise ResponsibleException(
                self._codes.CHANNEL_NOT_MATCH, f'Channel {raw!r} does not match this {self._role}.'
            )

    def _check_self_token(self) -> None:
        token = request.headers.get('Token')
        if not token:
            raise ResponsibleException(self._codes.SELF_TOKEN_NOT_GIVEN, 'Header "Token" is required.')
        if not hmac.compare_digest(token.encode(), self._self_token.encode()):
            raise ResponsibleException(self._codes.SELF_TOKEN_NOT_MATCH, f'Token does not match this {self._role}.')

    def _api_shutdown(self) -> dict[str, Any]:
        self._check_not_shutting_down()
        self._check_self_token()
        # shutdown() waits for the serving loop, so it must not run on a request thread of that loop.
        threading.Thread(target=self.shutdown, name=f'ding-{self._role}-shutdown', daemon=True).start()
        return success_response(message='Shutting down.')
