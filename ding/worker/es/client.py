"""A worker's end of one connection to the ES server (blocking sockets; ``send`` is safe from two threads)."""

from __future__ import annotations

import socket
import threading
from typing import Any

from .protocol import HELLO_BYTES, LENGTH, FrameCodec, Message, ProtocolError, read_hello, session_key


class ConnectionClosed(ConnectionError):
    """The server closed the connection (or went away)."""


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except OSError as exc:
            raise ConnectionClosed(f'the ES server went away: {exc}') from None
        if not chunk:
            raise ConnectionClosed('the ES server closed the connection')
        data += chunk
    return bytes(data)


class ServerConnection:
    """Connected to ``host:port`` with the run ``token`` once constructed (the hello read, the session key
    derived); ``send`` / ``recv`` messages, ``close()``."""

    def __init__(self, host: str, port: int, token: str, connect_timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            nonce = read_hello(recv_exact(self.sock, HELLO_BYTES))
        except BaseException:
            self.sock.close()
            raise
        self.sock.settimeout(None)
        self.codec = FrameCodec(session_key(token, nonce), 'worker')
        self._send_lock = threading.Lock()

    def send(self, msg_type: str, fields: dict[str, Any] | None = None) -> None:
        with self._send_lock:  # the MAC's sequence number and the bytes on the wire stay in the same order
            self._sendall(self.codec.encode(msg_type, fields))

    def send_sealed(self, rest: bytes) -> None:
        """Sign and send an arbitrary frame body (tests: a malformed header)."""
        with self._send_lock:
            self._sendall(self.codec.seal(rest))

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (tests: garbage)."""
        with self._send_lock:
            self._sendall(data)

    def _sendall(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ConnectionClosed(f'the ES server went away: {exc}') from None

    def recv(self) -> Message:
        """The next message; ``ConnectionClosed`` at the end of the stream, ``ProtocolError`` for a frame that
        does not verify (the connection cannot be trusted afterwards)."""
        length = self.codec.frame_length(recv_exact(self.sock, LENGTH.size))
        message = self.codec.decode(recv_exact(self.sock, length))
        return message

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


__all__ = ['ConnectionClosed', 'ProtocolError', 'ServerConnection', 'recv_exact']
