"""The one-host transport between SEED actor processes and the learner's inference server.

Each actor owns a **slot** of shared memory sized once, at start, for its ``n_envs`` envs (``SlotLayout``):
its observations, rewards and end flags (written by the actor) and its actions (written by the server).
A **Unix socket** per actor carries the join handshake and then one byte per direction and step: the
actor's ``STEP`` ("my slot holds new observations") and the server's ``ACT`` ("your actions are written").
The socket also tells each side that the other one went away (end of file), so nobody waits forever.

The slot is an anonymous ``memfd`` handed to the actor over the socket (``SCM_RIGHTS``) after it joined:
nothing is named in /dev/shm, so nothing can leak or be unlinked under a live actor (Python 3.11's
``multiprocessing.shared_memory`` registers an attached segment with the attaching process's resource
tracker, which unlinks it when that actor exits and a restarted actor could not map it again).

Join handshake (no pickle, fixed-size binary messages, the MAC checked before any field is read):

1. server -> actor: ``MAGIC`` + a fresh 16-byte nonce;
2. actor -> server: ``JOIN`` fields (actor id, envs, action count, observation shape) + HMAC-SHA256 of the
   nonce and the fields under the run secret (the scheme of ``ding.interaction.base.auth``: the secret
   never crosses the socket);
3. server -> actor: status, a message, and its own HMAC over the nonce and its reply (so the actor knows it
   reached its own run's learner); on success the slot's file descriptor rides along.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import mmap
import os
import secrets
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# The environment variable holding the run secret in actor processes (as for the parallel pipeline's workers).
RUN_SECRET_ENV = 'DING_RUN_SECRET'
MAGIC = b'DSD1'
NONCE_BYTES = 16
MAC_BYTES = 32
MAX_OBS_DIMS = 4
STEP = b's'  # actor -> server: the slot holds a new observation batch
ACT = b'a'  # server -> actor: the slot holds the actions
KEEP = b'k'  # server -> actor, now and then: the learner is alive (paused or busy, maybe): keep waiting
# magic, actor id, envs, action count, observation dims, observation shape (padded with zeros)
JOIN = struct.Struct(f'<4sHIIB{MAX_OBS_DIMS}I')
REPLY = struct.Struct('<4sB200s')  # magic, status (0: accepted), message (utf-8, zero padded)
REPLY_BYTES = REPLY.size + MAC_BYTES
ACCEPTED = 0
HANDSHAKE_TIMEOUT = 5.0


class TransportError(RuntimeError):
    """The peer broke the protocol, refused the join or went away."""


class Dropped(TransportError):
    """The learner dropped this actor (a remote actor is told why)."""


class LearnerSilent(TransportError):
    """The learner sent nothing (not even a keep-alive) for the actor's timeout: it is frozen or unreachable."""


def new_secret() -> str:
    """A fresh run secret (256 random bits, hex)."""
    return secrets.token_hex(32)


def parse_address(value: str, key: str = 'policy.seed.listen') -> tuple[str, int]:
    """``'HOST:PORT'`` (an IPv4 address or a host name; port 0: any free port) as ``(host, port)``;
    ``ValueError`` naming ``key`` otherwise."""
    host, sep, port = str(value).rpartition(':')
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{key}: expected 'HOST:PORT' (e.g. '127.0.0.1:7777'), got {value!r}")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        labels = host.split('.')
        if not all(label and label.replace('-', '').isalnum() and label.isascii() for label in labels):
            raise ValueError(f'{key}: {host!r} is neither an IPv4 address nor a host name') from None
    return host, int(port)


def remote_run_secret(listen: str, remote_actor_num: int, environ: Mapping[str, str] | None = None) -> str:
    """The run secret of a learner that accepts remote actors: ``$DING_RUN_SECRET`` (remote actors are given it
    as ``--token``). ``ValueError`` naming the key or the variable when the settings cannot work."""
    parse_address(listen)
    if remote_actor_num < 1:
        raise ValueError('policy.seed.listen is set but policy.seed.remote_actor_num is 0: no remote actor may join')
    value = (os.environ if environ is None else environ).get(RUN_SECRET_ENV, '')
    if not value:
        raise ValueError(
            f'policy.seed.listen needs a run secret the remote actors know: set ${RUN_SECRET_ENV} for the learner '
            '(and give it to `ding seed-actor --token`)'
        )
    from ding.interaction.base.auth import check_secret  # deferred: ding.interaction is slow to import (actors)

    return check_secret(value, f'${RUN_SECRET_ENV}')


def _mac(secret: str, *parts: bytes) -> bytes:
    return hmac.new(secret.encode(), b'\n'.join(parts), hashlib.sha256).digest()


@dataclass(frozen=True)
class SlotLayout:
    """Where each array of one actor's slot lies: actions ``[n_envs] int64`` first (8-byte aligned), then
    observations ``[n_envs, *obs_shape] float32``, rewards ``[n_envs] float32``, terminated and truncated
    ``[n_envs] uint8``."""

    n_envs: int
    obs_shape: tuple[int, ...]
    action_num: int

    def __post_init__(self) -> None:
        if not 1 <= self.n_envs < 2**16:
            raise ValueError(f'SlotLayout: n_envs must be in [1, 65535], got {self.n_envs}')
        if not 1 <= len(self.obs_shape) <= MAX_OBS_DIMS or any(not 1 <= d < 2**31 for d in self.obs_shape):
            raise ValueError(f'SlotLayout: obs_shape must have 1..{MAX_OBS_DIMS} positive dims, got {self.obs_shape}')
        if not 2 <= self.action_num < 2**31:
            raise ValueError(f'SlotLayout: action_num must be >= 2, got {self.action_num}')

    @property
    def obs_size(self) -> int:
        return math.prod(self.obs_shape)

    def offsets(self) -> dict[str, int]:
        n = self.n_envs
        action = 0
        obs = action + 8 * n
        reward = obs + 4 * n * self.obs_size
        terminated = reward + 4 * n
        truncated = terminated + n
        return {'action': action, 'obs': obs, 'reward': reward, 'terminated': terminated, 'truncated': truncated}

    @property
    def nbytes(self) -> int:
        return self.offsets()['truncated'] + self.n_envs

    def views(self, buf: mmap.mmap) -> SlotViews:
        at, n = self.offsets(), self.n_envs
        return SlotViews(
            action=np.frombuffer(buf, np.int64, n, at['action']),
            obs=np.frombuffer(buf, np.float32, n * self.obs_size, at['obs']).reshape(n, *self.obs_shape),
            reward=np.frombuffer(buf, np.float32, n, at['reward']),
            terminated=np.frombuffer(buf, np.uint8, n, at['terminated']),
            truncated=np.frombuffer(buf, np.uint8, n, at['truncated']),
        )

    def pack_join(self, actor_id: int) -> bytes:
        shape = list(self.obs_shape) + [0] * (MAX_OBS_DIMS - len(self.obs_shape))
        return JOIN.pack(MAGIC, actor_id, self.n_envs, self.action_num, len(self.obs_shape), *shape)


@dataclass
class SlotViews:
    """numpy views of one slot (no copies: writes land in the shared memory)."""

    action: np.ndarray
    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


class Slot:
    """One actor's shared memory: an anonymous memfd of ``layout.nbytes`` mapped here, and its views."""

    def __init__(self, layout: SlotLayout, fd: int | None = None) -> None:
        self.layout = layout
        owner = fd is None
        self.fd = os.memfd_create('ding-seed-slot', os.MFD_CLOEXEC) if fd is None else fd
        try:
            if owner:
                os.ftruncate(self.fd, layout.nbytes)
            elif os.fstat(self.fd).st_size != layout.nbytes:
                raise TransportError(
                    f'the slot handed over holds {os.fstat(self.fd).st_size} bytes, the layout needs {layout.nbytes}'
                )
            self._map = mmap.mmap(self.fd, layout.nbytes)
        except BaseException:
            os.close(self.fd)
            raise
        self.views = layout.views(self._map)

    def close(self) -> None:
        """Unmap and close (views taken earlier must not be used afterwards)."""
        if self.fd < 0:
            return
        self.views = None  # type: ignore[assignment]  # the views pin the map: drop them first
        try:
            self._map.close()
        except BufferError:  # a caller still holds a view: the map goes when that view does
            pass
        os.close(self.fd)
        self.fd = -1


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise TransportError('the peer closed the connection during the handshake')
        data += chunk
    return bytes(data)


@dataclass
class JoinRequest:
    """A join the server accepted the MAC of: who asks, and the slot layout it expects."""

    actor_id: int
    layout: SlotLayout


def check_join(secret: str, nonce: bytes, body: bytes, mac: bytes) -> JoinRequest:
    """The join ``body`` signed by ``mac`` for ``nonce``: the MAC is checked first (before any field is read),
    then the fields. Raises ``TransportError``."""
    if len(body) != JOIN.size or len(mac) != MAC_BYTES:
        raise TransportError('malformed join request (size)')
    if not hmac.compare_digest(mac, _mac(secret, b'join', nonce, body)):
        raise TransportError("the join is not signed with this run's secret")
    magic, actor_id, n_envs, action_num, ndim, *shape = JOIN.unpack(body)
    if magic != MAGIC or not 1 <= ndim <= MAX_OBS_DIMS:
        raise TransportError(f'malformed join request (magic {magic!r}, obs dims {ndim})')
    try:
        layout = SlotLayout(n_envs, tuple(shape[:ndim]), action_num)
    except ValueError as exc:
        raise TransportError(f'join request: {exc}') from None
    return JoinRequest(actor_id, layout)


def signed_join(secret: str, nonce: bytes, actor_id: int, layout: SlotLayout) -> bytes:
    """The actor's join message: the fields and their MAC for ``nonce``."""
    body = layout.pack_join(actor_id)
    return body + _mac(secret, b'join', nonce, body)


def signed_reply(secret: str, nonce: bytes, status: int, message: str) -> bytes:
    """The server's answer to a join (``REPLY_BYTES``): status 0 or a refusal naming why, and its MAC."""
    body = REPLY.pack(MAGIC, status, message.encode()[:200])
    return body + _mac(secret, b'accept', nonce, body)


def check_reply(secret: str, nonce: bytes, data: bytes) -> None:
    """Raise ``TransportError`` unless ``data`` is an acceptance signed by this run's learner for ``nonce``."""
    if len(data) != REPLY_BYTES:
        raise TransportError('the server closed the connection during the handshake (is the run secret right?)')
    reply, mac = data[: REPLY.size], data[REPLY.size :]
    if not hmac.compare_digest(mac, _mac(secret, b'accept', nonce, reply)):
        raise TransportError("the server's reply is not signed with this run's secret")
    _, status, message = REPLY.unpack(reply)
    if status != ACCEPTED:
        raise TransportError(f'join refused: {message.rstrip(bytes(1)).decode(errors="replace")}')


def server_handshake(sock: socket.socket, secret: str) -> tuple[bytes, JoinRequest]:
    """The server's side up to reading a join whose MAC is valid: ``(nonce, request)``. Raises
    ``TransportError`` for a wrong MAC (before reading any field) or a malformed request."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    sock.sendall(MAGIC + nonce)
    body = _recv_exact(sock, JOIN.size)
    mac = _recv_exact(sock, MAC_BYTES)
    return nonce, check_join(secret, nonce, body, mac)


def server_reply(sock: socket.socket, secret: str, nonce: bytes, status: int, message: str, fd: int | None) -> None:
    """Answer a join: ``status`` 0 with the slot's ``fd``, or a refusal naming why in ``message``."""
    payload = signed_reply(secret, nonce, status, message)
    if fd is None:
        sock.sendall(payload)
    else:
        socket.send_fds(sock, [payload], [fd])


def client_join(sock: socket.socket, secret: str, actor_id: int, layout: SlotLayout) -> Slot:
    """The actor's side of the handshake on a connected socket: the slot mapped, or ``TransportError`` naming
    why the server refused (or why the server is not this run's)."""
    sock.settimeout(HANDSHAKE_TIMEOUT)
    hello = _recv_exact(sock, len(MAGIC) + NONCE_BYTES)
    if hello[: len(MAGIC)] != MAGIC:
        raise TransportError('the socket does not speak the SEED transport')
    nonce = hello[len(MAGIC) :]
    sock.sendall(signed_join(secret, nonce, actor_id, layout))
    data, fds, _, _ = socket.recv_fds(sock, REPLY_BYTES, 1)
    try:
        data += _recv_exact(sock, REPLY_BYTES - len(data)) if 0 < len(data) < REPLY_BYTES else b''
        check_reply(secret, nonce, data)
        if len(fds) != 1:
            raise TransportError('the server accepted the join without handing over the slot')
        slot = Slot(layout, fds.pop())
    finally:
        for fd in fds:
            os.close(fd)
    sock.settimeout(None)
    return slot


class ActorClient:
    """An actor's link to the inference server: ``join()``, then ``request()`` once per env step."""

    def __init__(
        self, socket_path: str, secret: str, actor_id: int, layout: SlotLayout, timeout: float | None = None
    ) -> None:
        self.socket_path = socket_path
        self.actor_id = actor_id
        self.layout = layout
        self.timeout = timeout  # seconds without a byte from the server (not even KEEP) before LearnerSilent
        self._secret = secret
        self._sock: socket.socket | None = None
        self._slot: Slot | None = None

    def join(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT)
            sock.connect(self.socket_path)
            self._slot = client_join(sock, self._secret, self.actor_id, self.layout)
            sock.settimeout(self.timeout)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def request(self, obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """Send one step's observations (and the rewards / end flags of the step that led to them); wait for
        the actions (``[n_envs] int64``, a copy). Raises ``TransportError`` when the server went away,
        ``LearnerSilent`` when it sent nothing for ``timeout`` seconds."""
        assert self._sock is not None and self._slot is not None, 'join() first'
        views = self._slot.views
        views.obs[...] = obs
        views.reward[...] = reward
        views.terminated[...] = terminated
        views.truncated[...] = truncated
        try:
            self._sock.sendall(STEP)
            while True:  # keep-alives (KEEP) may come first, and right after the ACT
                answer = self._sock.recv(64)
                if not answer:
                    raise TransportError('the inference server closed the connection')
                if answer.strip(KEEP + ACT):
                    raise TransportError('protocol error: an unknown signal from the server')
                if ACT in answer:
                    break
        except TimeoutError:
            raise LearnerSilent(f'the learner sent nothing for {self.timeout:g} s (frozen or gone)') from None
        except OSError as exc:
            raise TransportError(f'the inference server went away: {exc}') from None
        action = views.action.copy()
        if action.min() < 0 or action.max() >= self.layout.action_num:
            raise TransportError(f'the server sent an action outside [0, {self.layout.action_num})')
        return action

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._slot is not None:
            self._slot.close()
            self._slot = None


__all__ = [
    'ACT',
    'ActorClient',
    'JoinRequest',
    'Dropped',
    'KEEP',
    'LearnerSilent',
    'RUN_SECRET_ENV',
    'STEP',
    'Slot',
    'SlotLayout',
    'SlotViews',
    'TransportError',
    'check_join',
    'check_reply',
    'new_secret',
    'parse_address',
    'remote_run_secret',
    'server_handshake',
    'server_reply',
    'signed_join',
    'signed_reply',
]
