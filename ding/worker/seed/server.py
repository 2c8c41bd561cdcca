"""The inference server: the learner process's thread that answers every SEED actor.

It accepts actors on a Unix socket (join handshake in ``transport``), waits for their ``STEP`` signals and
runs one forward for all waiting observations as soon as ``max_batch`` of them wait, ``max_wait_us``
microseconds passed since the first arrived, or every joined actor is waiting. The actions go back through
each actor's slot and an ``ACT`` byte; then the step is handed to the sink (trajectory assembly), which may
block when the learner is behind: the actors then wait too (back-pressure).

An actor that closes its socket, crashes, breaks the protocol or stays silent ``actor_timeout`` seconds after
its answer is dropped: its socket closed, its slot replaced (a late write of a hung process lands nowhere
read), its partial trajectory discarded by the sink; the others go on, and it may join again.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ding.worker.async_actor.queues import QueueClosed

from .acting import BatchActing
from .stats import InferenceStats
from .transport import ACT, HANDSHAKE_TIMEOUT, STEP, Slot, SlotLayout, TransportError, server_handshake, server_reply

REFUSED = 1


class StepSink(Protocol):
    """Where the server hands each answered request (``assembly``)."""

    def join(self, actor_id: int) -> None: ...

    def record(
        self,
        actor_id: int,
        obs: np.ndarray,
        first: np.ndarray,
        reward: np.ndarray,
        ended: tuple[np.ndarray, np.ndarray],
        action: np.ndarray,
        logit: np.ndarray,
        version: int,
    ) -> None: ...

    def drop(self, actor_id: int) -> None: ...


@dataclass
class ActorLink:
    """A joined actor: its socket and slot, and whether a request of it waits."""

    actor_id: int
    sock: socket.socket
    slot: Slot
    waiting: bool = False
    arrived: float = 0.0  # when its pending request was read
    answered: float = field(default_factory=time.monotonic)  # when it was last answered (or joined)
    # end flags of its previous request: the rows whose next observation starts an episode (all, at first)
    ended: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


class InferenceServer(threading.Thread):
    """Serves ``actor_num`` actors of slot ``layout`` on ``socket_path``; ``stop()`` closes every link (the
    actors see the end of file and exit). ``error`` holds what ended the thread, if anything but a stop."""

    def __init__(
        self,
        socket_path: str,
        secret: str,
        layout: SlotLayout,
        actor_num: int,
        acting: BatchActing,
        sink: StepSink,
        max_batch: int,
        max_wait_us: int,
        actor_timeout: float,
    ) -> None:
        super().__init__(name='ding-seed-inference', daemon=True)
        self.socket_path = socket_path
        self.layout = layout
        self.actor_num = actor_num
        self.acting = acting
        self.sink = sink
        self.max_batch = max_batch
        self.max_wait = max_wait_us / 1e6
        self.actor_timeout = actor_timeout
        self.stats = InferenceStats()
        self.error: BaseException | None = None
        self._secret = secret
        self._slots = [Slot(layout) for _ in range(actor_num)]  # preallocated; replaced after a drop
        self._claimed: set[int] = set()
        self._claim_lock = threading.Lock()
        self._links: dict[int, ActorLink] = {}
        self._pending: collections.deque[ActorLink] = collections.deque()
        self._joined: queue.Queue[ActorLink] = queue.Queue()
        self._stop_event = threading.Event()
        self._paused = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(socket_path)
            os.chmod(socket_path, 0o600)
            self._listener.listen(max(8, actor_num))
        except BaseException:
            self._close_sockets()
            raise
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, 'listen')
        self._selector.register(self._wake_r, selectors.EVENT_READ, 'wake')

    # ---- control (any thread) ------------------------------------------------------------------
    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self._wake()
        if self.is_alive():
            self.join(timeout)
        elif self.ident is None:  # never started: release what it holds
            self._close_all()

    def pause(self) -> None:
        """Stop answering (actors wait on their requests) until ``resume()``."""
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()
        self._wake()

    def joined(self) -> list[int]:
        with self._claim_lock:
            return sorted(self._claimed)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b'w')
        except (BlockingIOError, OSError):
            pass  # a wake is already pending, or the server is closed

    # ---- the thread ----------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                for key, _ in self._selector.select(self._select_timeout()):
                    if key.data == 'listen':
                        self._accept()
                    elif key.data == 'wake':
                        self._wake_r.recv(4096)
                    else:
                        self._read(key.data)
                self._register_joined()
                while self._pending and self._batch_due():
                    self._run_batch()
                self._drop_hung()
        except QueueClosed:
            pass  # the sink's queue closed: the pipeline is stopping
        except BaseException as exc:
            self.error = exc
        finally:
            self._close_all()

    def _select_timeout(self) -> float:
        if self._pending and not self._paused.is_set():
            return max(0.0, self._pending[0].arrived + self.max_wait - time.monotonic())
        return 0.5  # wake now and then to find hung actors

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        threading.Thread(target=self._handshake, args=(conn,), name='ding-seed-join', daemon=True).start()

    def _handshake(self, conn: socket.socket) -> None:
        """Runs on its own thread, so a slow or hostile peer cannot stall the server."""
        claimed: int | None = None
        try:
            conn.settimeout(HANDSHAKE_TIMEOUT)
            nonce, request = server_handshake(conn, self._secret)
            problem = self._claim(request.actor_id, request.layout)
            if problem:
                self.stats.count_refused_join()  # before the answer: whoever reads the refusal sees it counted
                with contextlib.suppress(OSError):  # a peer gone before the answer: already counted
                    server_reply(conn, self._secret, nonce, REFUSED, problem, None)
                conn.close()
                return
            claimed = request.actor_id
            slot = self._slots[claimed]
            server_reply(conn, self._secret, nonce, 0, 'ok', slot.fd)
            conn.settimeout(None)
        except (TransportError, OSError):
            self.stats.count_refused_join()
            conn.close()
            if claimed is not None:
                with self._claim_lock:
                    self._claimed.discard(claimed)
            return
        ended = np.ones(self.layout.n_envs, dtype=bool)  # every env's first observation starts an episode
        self._joined.put(ActorLink(claimed, conn, slot, ended=ended))
        self._wake()

    def _claim(self, actor_id: int, layout: SlotLayout) -> str | None:
        """Why ``actor_id`` with ``layout`` cannot join (None: it can, and its slot is now claimed)."""
        if not 0 <= actor_id < self.actor_num:
            return f'actor id {actor_id} is not in [0, {self.actor_num}) (policy.seed.actor_num)'
        for name in ('n_envs', 'obs_shape', 'action_num'):
            if getattr(layout, name) != getattr(self.layout, name):
                return f"{name} {getattr(layout, name)} differs from the learner's {getattr(self.layout, name)}"
        with self._claim_lock:
            if actor_id in self._claimed:
                return f'actor id {actor_id} is already connected'
            self._claimed.add(actor_id)
        return None

    def _register_joined(self) -> None:
        while True:
            try:
                link = self._joined.get_nowait()
            except queue.Empty:
                return
            if self._stop_event.is_set():
                link.sock.close()
                continue
            self._links[link.actor_id] = link
            self._selector.register(link.sock, selectors.EVENT_READ, link)
            self.sink.join(link.actor_id)

    def _read(self, link: ActorLink) -> None:
        try:
            data = link.sock.recv(16)
        except OSError:
            data = b''
        if data != STEP or link.waiting:
            self._drop(link)  # closed, crashed, or broke the protocol (two requests at once, a wrong byte)
            return
        link.waiting, link.arrived = True, time.monotonic()
        self._pending.append(link)

    def _batch_due(self) -> bool:
        if self._paused.is_set():
            return False
        waiting = sum(self.layout.n_envs for _ in self._pending)
        if waiting >= self.max_batch or len(self._pending) == len(self._links):
            return True
        return time.monotonic() >= self._pending[0].arrived + self.max_wait

    def _run_batch(self) -> None:
        n = self.layout.n_envs
        take = [self._pending.popleft()]
        while self._pending and (len(take) + 1) * n <= self.max_batch:
            take.append(self._pending.popleft())
        started = time.monotonic()
        # Copies: once answered, an actor overwrites its slot with its next step.
        obs = np.concatenate([link.slot.views.obs for link in take])
        first = np.concatenate([link.ended for link in take])
        reward = [link.slot.views.reward.copy() for link in take]
        ended = [(link.slot.views.terminated.astype(bool), link.slot.views.truncated.astype(bool)) for link in take]
        action, logit, version = self.acting.act(obs, first, [(link.actor_id, n) for link in take])
        answered: list[tuple[int, ActorLink]] = []
        latencies, delays = [], []
        for i, link in enumerate(take):
            link.slot.views.action[:] = action[i * n : (i + 1) * n]
            link.waiting = False
            try:
                link.sock.sendall(ACT)
            except OSError:
                self._drop(link)
                continue
            link.answered = time.monotonic()
            latencies.append((link.answered - link.arrived) * 1e6)
            delays.append((started - link.arrived) * 1e6)
            answered.append((i, link))
        self.stats.record_batch(len(take) * n, delays, latencies)
        for i, link in answered:
            rows = slice(i * n, (i + 1) * n)
            self.sink.record(
                link.actor_id, obs[rows], first[rows], reward[i], ended[i], action[rows], logit[rows], version
            )
            link.ended = ended[i][0] | ended[i][1]

    def _drop_hung(self) -> None:
        now = time.monotonic()
        for link in list(self._links.values()):
            if not link.waiting and now - link.answered > self.actor_timeout:
                self._drop(link)
                self.stats.hung_actors += 1

    def _drop(self, link: ActorLink) -> None:
        if self._links.get(link.actor_id) is not link:
            return
        del self._links[link.actor_id]
        if link in self._pending:
            self._pending.remove(link)  # its in-flight request is dropped
        self._selector.unregister(link.sock)
        link.sock.close()
        self.sink.drop(link.actor_id)
        self.acting.forget(link.actor_id)
        old = self._slots[link.actor_id]
        self._slots[link.actor_id] = Slot(self.layout)  # a hung process may still write into the old one
        old.close()
        with self._claim_lock:
            self._claimed.discard(link.actor_id)
        self.stats.dropped_actors += 1  # last: whoever sees it counted sees the actor gone everywhere

    def _close_sockets(self) -> None:
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass

    def _close_all(self) -> None:
        for link in list(self._links.values()):
            link.sock.close()
        self._links.clear()
        self._pending.clear()
        while not self._joined.empty():
            self._joined.get_nowait().sock.close()
        self._selector.close()
        self._close_sockets()
        for slot in self._slots:
            slot.close()


__all__ = ['ActorLink', 'InferenceServer', 'StepSink']
