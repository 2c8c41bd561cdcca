"""SEED actors on other hosts: ZeroMQ over TCP (chosen over gRPC streaming by measuring the round trip per step
on loopback: benchmarks/seed_inference.py ``--part transports``, figures in docs/seed.md).

The learner's inference server binds one ROUTER socket (``RemoteHub``, on ``policy.seed.listen``); every remote
actor connects one DEALER (``RemoteActorClient``). Messages are ZeroMQ multipart messages: a 4-byte kind, then
raw bytes; no pickle, no serialiser. The join is the one-host join's: the server hands out a fresh nonce, the
actor signs its id and layout with HMAC-SHA256 under the run secret (``--token``), the server checks the MAC
before reading a field and answers signed.

========================  ==========================================================================
actor -> server           frames after the kind
========================  ==========================================================================
``HELO``                  none: asks for a nonce
``JOIN``                  the signed join (``transport.signed_join``)
``STEP``                  observations ``[n_envs, *obs_shape] float32``, rewards ``[n_envs] float32``,
                          terminated and truncated ``[n_envs] uint8`` (raw little-endian bytes)
``QUIT``                  none: the actor leaves (dropped at once; a crashed one after ``actor_timeout``)
========================  ==========================================================================

Server -> actor: ``NONC`` + nonce, ``RPLY`` + the signed reply, ``ACTS`` + ``[n_envs] int64``, ``DROP`` + why.

Every message is checked before use (kind, frame count, exact sizes for the joined layout, flags 0 / 1, finite
numbers); ZeroMQ refuses frames over the largest valid one (``MAXMSGSIZE``). A bad message from a joined actor
drops that actor (counted); one from a peer that did not join is ignored (counted). The learner's liveness is
ZeroMQ's own heartbeat (``ZMQ_HEARTBEAT_*``): its I/O thread answers while the learner is paused or busy,
and nothing answers once the learner process is stopped or gone, so an actor exits after ``timeout`` seconds.
"""

from __future__ import annotations

import collections
import secrets
from collections.abc import Callable

import numpy as np

from .links import ActorLink, StepArrays
from .stats import InferenceStats
from .transport import (
    HANDSHAKE_TIMEOUT,
    JOIN,
    MAC_BYTES,
    NONCE_BYTES,
    REPLY_BYTES,
    Dropped,
    LearnerSilent,
    SlotLayout,
    TransportError,
    check_join,
    check_reply,
    parse_address,
    signed_join,
    signed_reply,
)

try:
    import zmq
except ImportError as exc:  # pragma: no cover - the remote extra is missing
    raise ImportError(
        'SEED remote actors (policy.seed.listen, ding seed-actor) need pyzmq: pip install "ding[remote]"'
    ) from exc

HELO, JOIN_KIND, STEP_KIND, QUIT = b'HELO', b'JOIN', b'STEP', b'QUIT'
NONC, RPLY, ACTS, DROP = b'NONC', b'RPLY', b'ACTS', b'DROP'
MAX_FRAMES = 5  # kind + 4 arrays: the longest valid message
MAX_MESSAGES_PER_POLL = 1024
MAX_PENDING_JOINS = 256  # nonces handed out and not yet used (the oldest is forgotten first)
REFUSED = 1


def _step_sizes(layout: SlotLayout) -> tuple[int, int, int, int]:
    n = layout.n_envs
    return 4 * n * layout.obs_size, 4 * n, n, n


def _recv_bounded(sock: zmq.Socket) -> list[bytes]:
    """One multipart message without blocking (empty when none waits); frames past ``MAX_FRAMES + 1`` (the
    ROUTER's identity first) are read and thrown away, so a hostile peer cannot make us hold many."""
    frames = [sock.recv(zmq.NOBLOCK)]
    while sock.getsockopt(zmq.RCVMORE):
        frame = sock.recv()
        if len(frames) <= MAX_FRAMES + 1:
            frames.append(frame)
    return frames


class RemoteLink(ActorLink):
    """A remote actor as the server sees it; its pending request arrays come from its last ``STEP``."""

    def __init__(self, hub: RemoteHub, identity: bytes, actor_id: int, n_envs: int) -> None:
        super().__init__(actor_id, n_envs)
        self.identity = identity
        self._hub = hub
        self._step: StepArrays | None = None

    def set_step(self, arrays: StepArrays) -> None:
        self._step = arrays

    def step(self) -> StepArrays:
        assert self._step is not None, 'no request pending'
        return self._step

    def answer(self, action: np.ndarray) -> None:
        self._hub.send(self.identity, ACTS, action.astype(np.int64, copy=False).tobytes())
        self._step = None

    def close(self) -> None:
        self._hub.forget(self, 'the learner dropped this actor (timeout, a bad message, or the run ended)')


class RemoteHub:
    """The server's ROUTER socket on ``address`` for actors ``actor_ids``; used by the server thread only.

    ``claim(actor_id, layout)`` says why a join cannot be accepted (None: accepted, the id now taken).
    ``poll()`` handles what arrived: ``(joined links, links with a new request, links that broke the protocol)``.
    """

    def __init__(
        self,
        address: str,
        secret: str,
        layout: SlotLayout,
        claim: Callable[[int, SlotLayout], str | None],
        stats: InferenceStats,
    ) -> None:
        host, port = parse_address(address)
        self.layout = layout
        self.stats = stats
        self._secret = secret
        self._claim = claim
        self._sizes = _step_sizes(layout)
        self._nonces: collections.OrderedDict[bytes, bytes] = collections.OrderedDict()
        self._links: dict[bytes, RemoteLink] = {}
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        try:
            self._sock.setsockopt(zmq.LINGER, 200)  # the last DROPs may go out when the server stops
            self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a gone actor fails instead of vanishing
            self._sock.setsockopt(zmq.MAXMSGSIZE, max(*self._sizes, JOIN.size + MAC_BYTES) + 64)
            self._sock.setsockopt(zmq.RCVHWM, 4096)
            if port:
                self._sock.bind(f'tcp://{host}:{port}')
                self.port = port
            else:
                self.port = self._sock.bind_to_random_port(f'tcp://{host}')
        except zmq.ZMQError as exc:
            self._sock.close(0)
            self._ctx.term()
            raise OSError(f'policy.seed.listen: cannot listen on {host}:{port}: {exc}') from None
        self.host = host

    @property
    def address(self) -> str:
        return f'{self.host}:{self.port}'

    def fileno(self) -> int:
        """A descriptor that becomes readable when messages arrive (edge-triggered: ``poll()`` drains)."""
        return int(self._sock.getsockopt(zmq.FD))

    def has_input(self) -> bool:
        return bool(int(self._sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN)

    def poll(self) -> tuple[list[RemoteLink], list[RemoteLink], list[tuple[RemoteLink, str | None]]]:
        """What arrived: ``(joined links, links with a new request, links to drop)``; a link to drop comes with
        what was wrong with its message, or None when the actor left (``QUIT``)."""
        joined: list[RemoteLink] = []
        requests: list[RemoteLink] = []
        gone: list[tuple[RemoteLink, str | None]] = []
        for _ in range(MAX_MESSAGES_PER_POLL):  # a flood waits for the next round: the server thread moves on
            try:
                frames = _recv_bounded(self._sock)
            except zmq.Again:
                break
            identity, kind, body = frames[0], frames[1:2], frames[2:]
            link = self._links.get(identity)
            if kind == [QUIT] and not body:
                if link is not None:  # a dropped actor's goodbye is ignored
                    gone.append((link, None))
                continue
            if link is None:
                new = self._handshake(identity, kind[0] if kind else b'', body)
                if new is not None:
                    joined.append(new)
                continue
            problem = self._step_problem(link, body) if kind == [STEP_KIND] else f'a message of kind {kind[:1]!r}'
            if problem:
                self.stats.count_bad_message()
                gone.append((link, problem))
            else:
                requests.append(link)
        return joined, requests, gone

    def _handshake(self, identity: bytes, kind: bytes, body: list[bytes]) -> RemoteLink | None:
        if kind == HELO and not body:
            nonce = secrets.token_bytes(NONCE_BYTES)
            self._nonces[identity] = nonce
            while len(self._nonces) > MAX_PENDING_JOINS:
                self._nonces.popitem(last=False)
            self._send_quiet(identity, NONC, nonce)
            return None
        nonce = self._nonces.pop(identity, b'')
        if kind != JOIN_KIND or not nonce or len(body) != 1:
            self.stats.count_bad_message()  # not joined: ignored (no answer helps a stranger)
            return None
        signed = body[0]
        try:
            request = check_join(self._secret, nonce, signed[: JOIN.size], signed[JOIN.size :])
        except TransportError as exc:
            self.stats.count_refused_join()  # before the answer: whoever reads the refusal sees it counted
            # The refusal is signed with the run's secret: a peer with another token cannot read it as an
            # acceptance, and learns nothing but that its token is wrong (which it would learn from silence).
            self._send_quiet(identity, RPLY, signed_reply(self._secret, nonce, REFUSED, str(exc)))
            return None
        problem = self._claim(request.actor_id, request.layout)
        if problem:
            self.stats.count_refused_join()  # before the answer, as above
            self._send_quiet(identity, RPLY, signed_reply(self._secret, nonce, REFUSED, problem))
            return None
        link = RemoteLink(self, identity, request.actor_id, self.layout.n_envs)
        self._links[identity] = link
        self._send_quiet(identity, RPLY, signed_reply(self._secret, nonce, 0, 'ok'))
        return link

    def _step_problem(self, link: RemoteLink, body: list[bytes]) -> str | None:
        """What is wrong with one STEP for the joined layout; None when it is valid (the link then holds it)."""
        sizes = tuple(len(frame) for frame in body)
        if sizes != self._sizes:
            return f'a STEP of frames {sizes} bytes, expected {self._sizes}'
        n = self.layout.n_envs
        obs = np.frombuffer(body[0], '<f4').reshape(n, *self.layout.obs_shape)
        reward = np.frombuffer(body[1], '<f4')
        terminated, truncated = np.frombuffer(body[2], np.uint8), np.frombuffer(body[3], np.uint8)
        if terminated.max() > 1 or truncated.max() > 1:
            return 'a STEP whose end flags are not 0 / 1'
        if not (np.isfinite(obs).all() and np.isfinite(reward).all()):
            return 'a STEP with non-finite observations or rewards'
        link.set_step(StepArrays(obs, reward, terminated, truncated))
        return None

    def send(self, identity: bytes, kind: bytes, payload: bytes) -> None:
        """Send one message to a joined actor; ``OSError`` when it is gone or does not read (its queue full)."""
        try:
            self._sock.send_multipart([identity, kind, payload], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            raise OSError(f'remote actor unreachable: {exc}') from None

    def _send_quiet(self, identity: bytes, kind: bytes, payload: bytes) -> None:
        try:
            self._sock.send_multipart([identity, kind, payload], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the peer is gone: nothing to tell it

    def forget(self, link: RemoteLink, why: str) -> None:
        """The server dropped ``link``: tell the actor (best effort) and ignore its identity from now on."""
        if self._links.get(link.identity) is link:
            del self._links[link.identity]
            self._send_quiet(link.identity, DROP, why.encode())

    def close(self) -> None:
        for link in list(self._links.values()):
            self.forget(link, 'the run ended')
        self._sock.close()
        self._ctx.term()


class RemoteActorClient:
    """A remote actor's link to the learner at ``address`` (``'HOST:PORT'``): ``join()``, then ``request()``
    once per env step. ``timeout``: seconds of silence (ZeroMQ heartbeats unanswered) after which the learner
    counts as gone (``LearnerSilent``)."""

    def __init__(self, address: str, secret: str, actor_id: int, layout: SlotLayout, timeout: float = 60.0) -> None:
        host, port = parse_address(address, '--connect')
        self.endpoint = f'tcp://{host}:{port}'
        self.actor_id = actor_id
        self.layout = layout
        self.timeout = timeout
        self._secret = secret
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        self._poller = zmq.Poller()

    def join(self) -> None:
        self._ctx = zmq.Context()
        sock = self._sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, REPLY_BYTES + 8 * self.layout.n_envs + 256)
        sock.setsockopt(zmq.HEARTBEAT_IVL, max(100, int(self.timeout * 250)))  # a ping every timeout / 4
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(200, int(self.timeout * 1000)))
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        sock.connect(self.endpoint)
        self._poller.register(sock, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)
        sock.send(HELO)
        nonce = self._expect(NONC, HANDSHAKE_TIMEOUT)
        if len(nonce) != NONCE_BYTES:
            raise TransportError('the server does not speak the SEED remote transport')
        sock.send_multipart([JOIN_KIND, signed_join(self._secret, nonce, self.actor_id, self.layout)])
        reply = self._expect(RPLY, HANDSHAKE_TIMEOUT, ' (is the token right?)')
        try:
            check_reply(self._secret, nonce, reply)
        except TransportError as exc:
            if 'not signed' in str(exc):
                raise TransportError(f'the learner at {self.endpoint} refused the join: is the token right?') from None
            raise

    def _expect(self, kind: bytes, timeout: float | None, hint: str = '') -> bytes:
        """The payload of the next message, which must be of ``kind``; ``TransportError`` otherwise, on a
        ``DROP``, on the connection lost, or after ``timeout`` seconds (None: no limit)."""
        assert self._sock is not None and self._monitor is not None, 'join() first'
        ready = dict(self._poller.poll(None if timeout is None else int(timeout * 1000)))
        if self._sock in ready:
            frames = _recv_bounded(self._sock)
            got, payload = frames[0], b''.join(frames[1:2])
            if got == kind and len(frames) == 2:
                return payload
            if got == DROP:
                raise Dropped(f'the learner dropped this actor: {payload[:200].decode(errors="replace")}')
            raise TransportError(f'protocol error: expected {kind!r} from the server, got {got[:8]!r}')
        if self._monitor in ready:
            raise LearnerSilent(
                f'lost the learner at {self.endpoint} (no answer to heartbeats for {self.timeout:g} s, or it closed)'
            )
        raise TransportError(f'no answer from {self.endpoint} within {timeout:g} s{hint}')

    def request(self, obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """Send one step; wait for the actions (``[n_envs] int64``). ``TransportError`` when the learner dropped
        this actor or went away (``LearnerSilent``: frozen or unreachable for ``timeout`` seconds)."""
        assert self._sock is not None, 'join() first'
        self._sock.send_multipart(
            [
                STEP_KIND,
                np.ascontiguousarray(obs, '<f4').tobytes(),
                np.ascontiguousarray(reward, '<f4').tobytes(),
                np.ascontiguousarray(terminated, np.uint8).tobytes(),
                np.ascontiguousarray(truncated, np.uint8).tobytes(),
            ]
        )
        payload = self._expect(ACTS, None)
        if len(payload) != 8 * self.layout.n_envs:
            raise TransportError(f'the server sent {len(payload)} bytes of actions, expected {8 * self.layout.n_envs}')
        action = np.frombuffer(payload, '<i8').copy()
        if action.min() < 0 or action.max() >= self.layout.action_num:
            raise TransportError(f'the server sent an action outside [0, {self.layout.action_num})')
        return action

    def close(self) -> None:
        """Leave: tell the learner (``QUIT``, best effort, 0.2 s at most) and close."""
        if self._sock is not None:
            self._sock.disable_monitor()
            try:
                self._sock.send(QUIT, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # not connected (any more): nobody to tell
            self._sock.close(200)
            self._sock = None
        if self._monitor is not None:
            self._monitor.close(0)
            self._monitor = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None


__all__ = ['RemoteActorClient', 'RemoteHub', 'RemoteLink']
