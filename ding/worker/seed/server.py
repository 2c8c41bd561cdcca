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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ding.worker.async_actor.queues import QueueClosed

from .acting import BatchActing
from .links import ActorLink, ShmLink
from .stats import InferenceStats
from .transport import HANDSHAKE_TIMEOUT, Slot, SlotLayout, TransportError, server_handshake, server_reply

if TYPE_CHECKING:
    from .remote import RemoteHub

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


class InferenceServer(threading.Thread):
    """Serves ``actor_num`` actors of slot ``layout`` on ``socket_path`` and, with ``listen`` (``'HOST:PORT'``),
    ``remote_actor_num`` more over TCP (ids ``actor_num ...``; ``remote``); ``stop()`` closes every link (the
    actors see the end of file and exit). ``error`` holds what ended the thread, if anything but a stop;
    ``log`` (optional) is told which remote actor was dropped for a bad message."""

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
        listen: str | None = None,
        remote_actor_num: int = 0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(name='ding-seed-inference', daemon=True)
        self.socket_path = socket_path
        self.layout = layout
        self.actor_num = actor_num
        self.remote_ids = range(actor_num, actor_num + remote_actor_num) if listen else range(0)
        self.acting = acting
        self.sink = sink
        self.max_batch = max_batch
        self.max_wait = max_wait_us / 1e6
        self.actor_timeout = actor_timeout
        self.stats = InferenceStats()
        self.log = log  # where a dropped remote actor is reported (e.g. the learner's logger)
        self.error: BaseException | None = None
        self._secret = secret
        self._slots = [Slot(layout) for _ in range(actor_num)]  # preallocated; replaced after a drop
        self._claimed: set[int] = set()
        self._claim_lock = threading.Lock()
        self._links: dict[int, ActorLink] = {}
        self._pending: collections.deque[ActorLink] = collections.deque()
        self._joined: queue.Queue[ShmLink] = queue.Queue()
        self._stop_event = threading.Event()
        self._paused = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._remote: RemoteHub | None = None
        try:
            self._listener.bind(socket_path)
            os.chmod(socket_path, 0o600)
            self._listener.listen(max(8, actor_num))
            if listen:
                from .remote import RemoteHub  # deferred: pyzmq is optional (the remote extra)

                self._remote = RemoteHub(listen, secret, layout, self._claim_remote, self.stats)
        except BaseException:
            self._close_sockets()
            raise
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, 'listen')
        self._selector.register(self._wake_r, selectors.EVENT_READ, 'wake')
        if self._remote is not None:
            self._selector.register(self._remote.fileno(), selectors.EVENT_READ, 'remote')

    @property
    def remote_address(self) -> str | None:
        """``'HOST:PORT'`` where remote actors connect (the port chosen when ``listen`` named port 0)."""
        return None if self._remote is None else self._remote.address

    # ---- control (any thread) ------------------------------------------------------------------
    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self._wake()
        if self.is_alive():
            self.join(timeout)
        elif self.ident is None:  # never started: release what it holds
            self._close_all()

    def pause(self) -> None:
        """Answer no request (actors wait on theirs, kept alive) until ``resume()``."""
        self._paused.set()
        self._wake()

    def resume(self) -> None:
        self._paused.clear()
        self._wake()

    @property
    def paused(self) -> bool:
        return self._paused.is_set()

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
        heartbeat = threading.Thread(target=self._heartbeat, name='ding-seed-heartbeat', daemon=True)
        heartbeat.start()
        try:
            while not self._stop_event.is_set():
                for key, _ in self._selector.select(self._select_timeout()):
                    if key.data == 'listen':
                        self._accept()
                    elif key.data == 'wake':
                        self._wake_r.recv(4096)
                    elif isinstance(key.data, ShmLink):
                        self._read(key.data)
                self._poll_remote()
                self._register_joined()
                while self._pending and self._batch_due():
                    self._run_batch()
                self._drop_hung()
        except QueueClosed:
            pass  # the sink's queue closed: the pipeline is stopping
        except BaseException as exc:
            self.error = exc
        finally:
            self._stop_event.set()
            heartbeat.join()
            self._close_all()

    def _heartbeat(self) -> None:
        """Every ``actor_timeout / 4`` seconds a keep-alive to every actor, also while paused or while the
        server waits on the learner: an actor that hears nothing for ``actor_timeout`` takes the learner for
        frozen (stopped, hung) and exits."""
        while not self._stop_event.wait(self.actor_timeout / 4):
            for link in list(self._links.values()):
                link.keepalive()

    def _select_timeout(self) -> float:
        if self._remote is not None and self._remote.has_input():
            return 0.0  # the remote socket's descriptor is edge-triggered: what is queued does not wake us
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
            problem = self._claim(request.actor_id, request.layout, range(self.actor_num), 'policy.seed.actor_num')
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
        self._joined.put(ShmLink(claimed, conn, slot))
        self._wake()

    def _claim_remote(self, actor_id: int, layout: SlotLayout) -> str | None:
        return self._claim(actor_id, layout, self.remote_ids, 'the remote ids: policy.seed.remote_actor_num')

    def _claim(self, actor_id: int, layout: SlotLayout, ids: range, what: str) -> str | None:
        """Why ``actor_id`` with ``layout`` cannot join (None: it can, and its id is now claimed)."""
        if actor_id not in ids:
            return f'actor id {actor_id} is not in [{ids.start}, {ids.stop}) ({what})'
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
                link.close()
                continue
            self._selector.register(link.sock, selectors.EVENT_READ, link)
            self._add_link(link)

    def _add_link(self, link: ActorLink) -> None:
        self._links[link.actor_id] = link
        self.sink.join(link.actor_id)

    def _poll_remote(self) -> None:
        if self._remote is None:
            return
        joined, requests, gone = self._remote.poll()
        for link in joined:
            self._add_link(link)
        for link in requests:
            self._request_arrived(link)
        for link, problem in gone:
            if problem and self.log is not None:
                self.log(f'seed: remote actor {link.actor_id} dropped: it sent {problem}')
            self._drop(link)

    def _read(self, link: ShmLink) -> None:
        if link.receive():
            self._request_arrived(link)
        else:
            self._drop(link)  # closed, crashed, or broke the protocol

    def _request_arrived(self, link: ActorLink) -> None:
        if link.waiting:
            self._drop(link)  # two requests at once: a protocol error
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
        steps = [link.step() for link in take]
        # Copies: once answered, an actor overwrites its slot with its next step.
        obs = np.concatenate([step.obs for step in steps])
        first = np.concatenate([link.ended for link in take])
        reward = [step.reward.copy() for step in steps]
        ended = [(step.terminated.astype(bool), step.truncated.astype(bool)) for step in steps]
        action, logit, version = self.acting.act(obs, first, [(link.actor_id, n) for link in take])
        answered: list[tuple[int, ActorLink]] = []
        latencies, delays = [], []
        for i, link in enumerate(take):
            link.waiting = False
            try:
                link.answer(action[i * n : (i + 1) * n])
            except (OSError, TransportError):
                self._drop(link)
                continue
            link.answered = time.monotonic()
            latencies.append((link.answered - link.arrived) * 1e6)
            delays.append((started - link.arrived) * 1e6)
            answered.append((i, link))
        self.stats.record_batch(len(take) * n, delays, latencies, [link.actor_id for _, link in answered])
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
        if isinstance(link, ShmLink):
            self._selector.unregister(link.sock)
            old = self._slots[link.actor_id]
            self._slots[link.actor_id] = Slot(self.layout)  # a hung process may still write into the old one
            old.close()
        link.close()
        self.sink.drop(link.actor_id)
        self.acting.forget(link.actor_id)
        with self._claim_lock:
            self._claimed.discard(link.actor_id)
        self.stats.dropped_actors += 1  # last: whoever sees it counted sees the actor gone everywhere

    def _close_sockets(self) -> None:
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        if self._remote is not None:
            self._remote.close()
            self._remote = None
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass

    def _close_all(self) -> None:
        for link in list(self._links.values()):
            link.close()
        self._links.clear()
        self._pending.clear()
        while not self._joined.empty():
            self._joined.get_nowait().close()
        self._selector.close()
        self._close_sockets()
        for slot in self._slots:
            slot.close()


def follow_run_control(server: InferenceServer, run_state: Callable[[], str]) -> Callable[[dict[str, Any]], None]:
    """A run-control listener (``RunControl.add_listener``) that pauses ``server`` while ``run_state()`` is
    ``'paused'`` and resumes it otherwise. The state is read again under a lock at every event, so events of two
    threads (the training loop's ``paused``, the HTTP server's ``resume``) cannot leave it paused by mistake."""
    lock = threading.Lock()

    def on_event(record: dict[str, Any]) -> None:
        with lock:
            if run_state() == 'paused':
                server.pause()
            else:
                server.resume()

    return on_event


__all__ = ['InferenceServer', 'StepSink', 'follow_run_control']
