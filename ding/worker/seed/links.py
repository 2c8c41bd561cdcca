"""A joined actor as the inference server sees it, whatever carries its requests (``ActorLink``), and the one-host
kind: a Unix socket for the signals and a shared-memory slot for the arrays (``ShmLink``). The remote kind
(ZeroMQ over TCP) is ``remote.RemoteLink``. The server batches, acts and assembles the same way for both."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import numpy as np

from .transport import ACT, KEEP, STEP, Slot


@dataclass
class StepArrays:
    """One request's arrays (views: valid until the request is answered)."""

    obs: np.ndarray  # [n_envs, *obs_shape] float32
    reward: np.ndarray  # [n_envs] float32: rewards of the step that led to obs
    terminated: np.ndarray  # [n_envs] uint8
    truncated: np.ndarray  # [n_envs] uint8


class ActorLink:
    """What the server keeps of one joined actor: whether a request of it waits and since when, when it was
    last answered, and which of its envs start an episode; subclasses carry the request and the answer."""

    def __init__(self, actor_id: int, n_envs: int) -> None:
        self.actor_id = actor_id
        self.waiting = False
        self.arrived = 0.0  # when its pending request was read
        self.answered = time.monotonic()  # when it was last answered (or joined)
        # end flags of its previous request: the rows whose next observation starts an episode (all, at first)
        self.ended = np.ones(n_envs, dtype=bool)

    def step(self) -> StepArrays:
        """The pending request's arrays."""
        raise NotImplementedError

    def answer(self, action: np.ndarray) -> None:
        """Send the actions of the pending request; ``OSError`` (or ``TransportError``) when the actor is gone."""
        raise NotImplementedError

    def keepalive(self) -> None:
        """Tell the actor the learner is alive (called from the server's heartbeat thread; never blocks)."""

    def close(self) -> None:
        raise NotImplementedError


class ShmLink(ActorLink):
    """An actor on this host: ``STEP`` / ``ACT`` / ``KEEP`` bytes on ``sock``, the arrays in ``slot``."""

    def __init__(self, actor_id: int, sock: socket.socket, slot: Slot) -> None:
        super().__init__(actor_id, slot.layout.n_envs)
        self.sock = sock
        self.slot = slot
        self._lock = threading.Lock()  # the heartbeat thread must not send on a socket being closed (fd reuse)

    def receive(self) -> bool:
        """Read the actor's signal (its socket is readable): True for one ``STEP``, False when it closed,
        crashed or broke the protocol."""
        try:
            data = self.sock.recv(16)
        except OSError:
            return False
        return data == STEP

    def step(self) -> StepArrays:
        views = self.slot.views
        return StepArrays(views.obs, views.reward, views.terminated, views.truncated)

    def answer(self, action: np.ndarray) -> None:
        self.slot.views.action[:] = action
        self.sock.sendall(ACT)

    def keepalive(self) -> None:
        with self._lock:
            if self.sock.fileno() < 0:
                return
            try:
                self.sock.send(KEEP, socket.MSG_DONTWAIT)
            except OSError:
                pass  # its buffer is full (a hung actor) or it went away: the server thread finds out

    def close(self) -> None:
        with self._lock:
            self.sock.close()


__all__ = ['ActorLink', 'ShmLink', 'StepArrays']
