"""The wire format between the ES learner server and its workers (TCP, one connection per worker).

On connect the server sends ``HELLO``: ``MAGIC`` + a fresh 16-byte nonce (nothing else is ever sent
unsigned). Both sides derive the session key ``HMAC-SHA256(token, 'ding-es-v1' + nonce)`` (the token
never crosses the socket); then every message is one frame::

    length  u32 big-endian: the bytes that follow (bounded by ``max_frame_bytes``)
    mac     32 bytes: HMAC-SHA256(session key, direction + sequence number (u64) + the rest)
    hlen    u16 big-endian: header length
    header  msgpack map: ``v`` (schema version), ``t`` (message type) and the type's fields
    body    raw bytes (a model chunk: float32, little-endian)

The MAC is checked (``hmac.compare_digest``) before a byte of the header is parsed; sequence numbers per
direction stop replays and reflections. Nothing is ever unpickled.

A ``ProtocolError`` is ``fatal`` when the stream cannot be trusted or resynchronised any more (a wrong MAC,
an out-of-bounds length): the connection is closed. A frame that is authentic but malformed (bad msgpack,
wrong schema version, a missing or mistyped field) is not fatal: it is logged, counted, and skipped.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from dataclasses import dataclass
from typing import Any

try:
    import msgpack
except ImportError as exc:  # an optional dependency: the ES pipeline only
    raise ImportError("the ES workers' protocol needs msgpack: pip install 'ding[es]'") from exc

MAGIC = b'DES1'
SCHEMA_VERSION = 1
NONCE_BYTES = 16
MAC_BYTES = 32
HELLO_BYTES = len(MAGIC) + NONCE_BYTES
LENGTH = struct.Struct('>I')
HEADER_LENGTH = struct.Struct('>H')
SEQUENCE = struct.Struct('>Q')
MIN_FRAME_BYTES = MAC_BYTES + HEADER_LENGTH.size
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024
# One byte per direction in the MAC: a frame the server sent cannot be reflected back to it as the worker's.
TO_SERVER = b'w'
TO_WORKER = b's'

# Message types and their fields (name -> allowed python types). ``bool`` is never accepted for a number.
WORKER_MESSAGES: dict[str, dict[str, tuple[type, ...]]] = {
    'init': {},  # worker -> server: initialise me
    'return': {
        'noise_id': (int,),
        'return_pos': (int, float),
        'return_neg': (int, float),
        'version': (int,),
        'env_steps': (int,),
    },  # fmt: skip
    'ack': {'version': (int,), 'offset': (int,)},  # worker -> server: chunk received, send the next one
}
SERVER_MESSAGES: dict[str, dict[str, tuple[type, ...]]] = {
    'init': {'worker_id': (int,), 'seed': (int,), 'spec': (dict,)},
    'chunk': {'version': (int,), 'offset': (int,), 'total': (int,)},  # body: the model bytes [offset, +len)
}


class ProtocolError(ValueError):
    """An invalid packet; ``fatal``: the connection must be closed (the stream is not trustworthy any more)."""

    def __init__(self, message: str, fatal: bool) -> None:
        super().__init__(message)
        self.fatal = fatal


@dataclass(frozen=True)
class Message:
    """One decoded frame: its type, its header fields and its body."""

    type: str
    fields: dict[str, Any]
    body: bytes = b''


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def hello(nonce: bytes) -> bytes:
    return MAGIC + nonce


def read_hello(data: bytes) -> bytes:
    """The nonce of a server's hello; ``ProtocolError`` when it is not one."""
    if len(data) != HELLO_BYTES or data[: len(MAGIC)] != MAGIC:
        raise ProtocolError('the server does not speak the ding ES protocol', fatal=True)
    return data[len(MAGIC) :]


def session_key(token: str, nonce: bytes) -> bytes:
    return hmac.new(token.encode(), b'ding-es-v1' + nonce, hashlib.sha256).digest()


class FrameCodec:
    """One side of one connection: signs what it sends, checks and parses what it receives.

    ``role`` is ``'server'`` or ``'worker'``; ``max_frame_bytes`` bounds what it receives (the length prefix
    of a larger frame is refused before anything is read)."""

    def __init__(self, key: bytes, role: str, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if role not in ('server', 'worker'):
            raise ValueError(f"FrameCodec: role must be 'server' or 'worker', got {role!r}")
        self._key = key
        self._send_direction, self._recv_direction = (
            (TO_WORKER, TO_SERVER) if role == 'server' else (TO_SERVER, TO_WORKER)
        )
        self._incoming = WORKER_MESSAGES if role == 'server' else SERVER_MESSAGES
        self._outgoing = SERVER_MESSAGES if role == 'server' else WORKER_MESSAGES
        self.max_frame_bytes = max_frame_bytes
        self._sent = 0
        self._received = 0

    def _mac(self, direction: bytes, sequence: int, rest: bytes | memoryview) -> bytes:
        mac = hmac.new(self._key, direction + SEQUENCE.pack(sequence), hashlib.sha256)
        mac.update(rest)
        return mac.digest()

    def encode(self, msg_type: str, fields: dict[str, Any] | None = None, body: bytes | memoryview = b'') -> bytes:
        """The frame of one message of this side's schema (length prefix included)."""
        fields = dict(fields or {})
        expected = self._outgoing.get(msg_type)
        if expected is None or set(fields) != set(expected):
            raise ValueError(f'encode: {msg_type!r} takes fields {sorted(expected or {})}, got {sorted(fields)}')
        header = msgpack.packb({'v': SCHEMA_VERSION, 't': msg_type, **fields}, use_bin_type=True)
        return self.seal(HEADER_LENGTH.pack(len(header)) + header + bytes(body))

    def seal(self, rest: bytes) -> bytes:
        """Sign ``rest`` (header length, header, body: anything, e.g. a test's malformed header) as the next
        frame of this side."""
        mac = self._mac(self._send_direction, self._sent, rest)
        self._sent += 1
        return LENGTH.pack(MAC_BYTES + len(rest)) + mac + rest

    def frame_length(self, prefix: bytes) -> int:
        """The length announced by a 4-byte prefix; fatal ``ProtocolError`` when out of bounds."""
        (length,) = LENGTH.unpack(prefix)
        if not MIN_FRAME_BYTES <= length <= self.max_frame_bytes:
            raise ProtocolError(
                f'frame length {length} outside [{MIN_FRAME_BYTES}, {self.max_frame_bytes}]', fatal=True
            )
        return length

    def decode(self, frame: bytes) -> Message:
        """Check the MAC of one frame (without its length prefix), then parse it. Raises ``ProtocolError``:
        fatal for a wrong MAC, not fatal for an authentic frame that breaks the schema."""
        mac, rest = frame[:MAC_BYTES], memoryview(frame)[MAC_BYTES:]
        if len(frame) < MIN_FRAME_BYTES or not hmac.compare_digest(
            mac, self._mac(self._recv_direction, self._received, rest)
        ):
            raise ProtocolError('bad MAC (wrong token, a replayed frame or garbage)', fatal=True)
        self._received += 1
        (header_length,) = HEADER_LENGTH.unpack(rest[: HEADER_LENGTH.size])
        end = HEADER_LENGTH.size + header_length
        if end > len(rest):
            raise ProtocolError(f'header length {header_length} exceeds the frame', fatal=False)
        try:
            header = msgpack.unpackb(rest[HEADER_LENGTH.size : end], raw=False, strict_map_key=True)
        except Exception as exc:  # msgpack raises several types for malformed input
            raise ProtocolError(f'header is not msgpack: {type(exc).__name__}', fatal=False) from None
        return Message(*self._check_schema(header), body=bytes(rest[end:]))

    def _check_schema(self, header: Any) -> tuple[str, dict[str, Any]]:
        if not isinstance(header, dict):
            raise ProtocolError(f'header is a {type(header).__name__}, not a map', fatal=False)
        if header.get('v') != SCHEMA_VERSION:
            raise ProtocolError(f'schema version {header.get("v")!r} is not {SCHEMA_VERSION}', fatal=False)
        msg_type = header.get('t')
        if not isinstance(msg_type, str):
            raise ProtocolError('header has no message type (t)', fatal=False)
        expected = self._incoming.get(msg_type)
        fields = {k: v for k, v in header.items() if k not in ('v', 't')}
        if expected is None:
            return msg_type, fields  # an unknown type: the receiver logs it and does nothing else
        for name, types in expected.items():
            value = fields.get(name)
            if isinstance(value, bool) or not isinstance(value, types):
                raise ProtocolError(f'{msg_type!r}: field {name!r} is {value!r}, expected {types}', fatal=False)
        return msg_type, {name: fields[name] for name in expected}


def known_types(role: str) -> set[str]:
    """The message types a side of ``role`` understands."""
    return set(WORKER_MESSAGES if role == 'server' else SERVER_MESSAGES)


__all__ = [
    'DEFAULT_MAX_FRAME_BYTES',
    'FrameCodec',
    'HELLO_BYTES',
    'LENGTH',
    'MAGIC',
    'Message',
    'ProtocolError',
    'SCHEMA_VERSION',
    'hello',
    'known_types',
    'new_nonce',
    'read_hello',
    'session_key',
]
