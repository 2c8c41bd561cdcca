"""
What bounds a server against slow or hostile clients: the limits themselves (``HttpLimits``, the ``system.http``
section), the request handler (read timeout, quiet logs), the threaded werkzeug server that serves at most N
connections at once (and makes the TLS handshake of each on that connection's own thread), and the check of a
body's framing (Content-Length against the route's limit, no chunked bodies) made before the body is read.
"""

import io
import json
import logging
import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol, cast

from flask import Flask, request
from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from .. import config
from .envelope import ResponsibleException, failure_response

logger = logging.getLogger(__name__)


class _Codes(Protocol):
    @property
    def REQUEST_INVALID(self) -> Any: ...

    @property
    def UNKNOWN_ERROR(self) -> Any: ...


@dataclass(frozen=True)
class HttpLimits:
    """
    The bounds of one server (``system.http`` in a parallel config): request bodies of control routes (reachable
    before authentication) up to ``control_body_bytes``, of data routes up to ``data_body_bytes``; every socket
    operation of a connection must progress within ``read_timeout`` seconds; at most ``max_connections``
    connections are served at once (one thread each).
    """

    control_body_bytes: int = config.MAX_CONTROL_REQUEST_BYTES
    data_body_bytes: int = config.MAX_REQUEST_BYTES
    read_timeout: float = config.DEFAULT_READ_TIMEOUT
    max_connections: int = config.DEFAULT_MAX_CONNECTIONS

    def __post_init__(self) -> None:
        for name in ('control_body_bytes', 'data_body_bytes', 'max_connections'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'{name} must be an int >= 1, got {value!r}')
        timeout = self.read_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f'read_timeout must be a positive number of seconds, got {timeout!r}')

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None, where: str = 'system.http') -> 'HttpLimits':
        """The limits a ``system.http`` section sets (absent or None keys keep their defaults); ``ValueError``
        naming ``where`` and the key when a key is unknown or a value is out of bounds."""
        known = [f.name for f in fields(cls)]
        section = section or {}
        unknown = [str(key) for key in section if key not in known]
        if unknown:
            raise ValueError(f'{where}: unknown key(s) {unknown}; valid keys: {known}')
        try:
            return cls(**{key: value for key, value in section.items() if value is not None})
        except ValueError as exc:
            raise ValueError(f'{where}.{exc}') from None


# The most one read of a connection takes at once. werkzeug discards a body the app did not read (after a refusal)
# with 10 MB reads; bounded, a refused 20 MB body costs 64 KB at a time instead of 10 MB per connection.
READ_CHUNK_BYTES = 64 * 1024


class _BoundedReads:
    """A connection's read stream whose ``read(n)`` returns at most ``READ_CHUNK_BYTES`` (fewer bytes than asked
    is allowed of a stream read; werkzeug's body stream uses ``readinto``, and its discard loop reads until
    empty). Everything else is the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def read(self, size: int | None = -1) -> bytes:
        if size is not None and size > READ_CHUNK_BYTES:
            size = READ_CHUNK_BYTES
        data: bytes = self._stream.read(size)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class BoundedRequestHandler(WSGIRequestHandler):
    """werkzeug's request handler reading at most ``READ_CHUNK_BYTES`` at once; a client that stalls past the
    class's ``timeout`` (set by ``request_handler``) has its connection closed, logged at DEBUG only."""

    def setup(self) -> None:
        super().setup()
        self.rfile = cast(io.BufferedIOBase, _BoundedReads(self.rfile))

    def log_error(self, format: str, *args: Any) -> None:
        # A client stalling past the read timeout is its own fault, not the server's: kept out of ERROR, where a
        # flood of half-open connections would otherwise write one line each.
        if format.startswith('Request timed out'):
            logger.debug('%s closed a connection: ' + format, self.address_string(), *args)
            return
        super().log_error(format, *args)


class QuietRequestHandler(BoundedRequestHandler):
    """Request handler without werkzeug's one-line-per-request access log (errors are still logged)."""

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


def request_handler(quiet: bool, read_timeout: float) -> type[WSGIRequestHandler]:
    """A handler class whose connections time out after ``read_timeout`` seconds without progress
    (socketserver applies the class's ``timeout`` to each connection's socket)."""
    base = QuietRequestHandler if quiet else BoundedRequestHandler
    return type(f'{base.__name__}WithTimeout', (base,), {'timeout': read_timeout})


class BoundedWSGIServer(ThreadedWSGIServer):
    """
    werkzeug's threaded server (one thread per connection) serving at most ``max_connections`` connections at
    once: a connection beyond that is answered ``busy_answer`` (a complete HTTP response) and closed at once,
    never queued. The read timeout is the handler class's ``timeout`` (applied to each connection's socket).
    """

    def __init__(
        self,
        host: str,
        port: int,
        app: Flask,
        handler: type[WSGIRequestHandler],
        fd: int,
        max_connections: int,
        busy_answer: bytes,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(host, port, app, handler=handler, fd=fd)
        # Set after the base class, which would wrap the listening socket instead (see ``finish_request``);
        # werkzeug reads it for the request's scheme and to log TLS errors as such.
        self.ssl_context = tls_context
        self._slots = threading.BoundedSemaphore(max_connections)
        self._busy_answer = busy_answer
        self._handshake_timeout = handler.timeout  # the read timeout bounds the TLS handshake too

    def process_request(self, request: Any, client_address: Any) -> None:
        # Runs on the accepting thread: it must never block, so a full server refuses instead of waiting.
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        # The TLS handshake is made here, on the connection's own thread and within the read timeout. werkzeug's
        # own TLS wraps the listening socket, which makes every handshake on the accepting thread: one client that
        # connects and sends nothing would stall all the others.
        request.settimeout(self._handshake_timeout)
        try:
            secure = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            logger.debug('TLS handshake with %s failed: %s', client_address, exc)
            return
        try:
            super().finish_request(secure, client_address)
        finally:
            self.shutdown_request(secure)  # the plain socket was handed to ``secure``: closing it is a no-op

    def _refuse(self, request: socket.socket) -> None:
        if self.ssl_context is not None:
            # An answer needs a handshake first, which the accepting thread must not wait for: closed unanswered.
            self.shutdown_request(request)
            return
        try:
            request.setblocking(False)
            request.send(self._busy_answer)
        except OSError:
            pass  # the client went away or its buffer is full: closing is all that is left
        self.shutdown_request(request)


def busy_answer(codes: _Codes, max_connections: int) -> bytes:
    envelope = failure_response(codes.UNKNOWN_ERROR, f'Too many connections (at most {max_connections}); retry later.')
    body = json.dumps(envelope).encode()
    head = (
        'HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n'
        f'Content-Length: {len(body)}\r\nConnection: close\r\n\r\n'
    )
    return head.encode() + body


def check_body_framing(limit: int, codes: _Codes) -> None:
    """Refuse a body from its headers alone: chunked (411, its size is unknown until read) or longer than
    ``limit`` (413). Nothing of the body has been read when this runs."""
    if 'chunked' in request.headers.get('Transfer-Encoding', '').lower():
        raise ResponsibleException(
            codes.REQUEST_INVALID, 'Chunked request bodies are not accepted; send Content-Length.', status_code=411
        )
    length = request.content_length
    if length is not None and length > limit:
        raise ResponsibleException(
            codes.REQUEST_INVALID,
            f'Request body of {length} bytes exceeds the limit of {limit} bytes for {request.path}.',
            status_code=413,
        )
