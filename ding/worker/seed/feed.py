"""The learner's side of the assembled-trajectory queue: batches of unrolls (SEED IMPALA) or chunks of
transitions (SEED DQN), env steps counted, and a health check while it waits."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from ding.worker.async_actor.feed import LagStats
from ding.worker.async_actor.queues import TrajectoryQueue
from ding.worker.async_actor.trajectory import Unroll, join_unrolls

from .assembly import TransitionChunk


class SeedFeed:
    """Takes what the server's assembler queued. ``check`` runs whenever a wait of ``poll_seconds`` finds the
    queue empty (it raises when the server or the actors failed). ``envstep`` counts the env steps taken (a
    checkpoint saves it as the collector's env steps)."""

    def __init__(self, queue: TrajectoryQueue[Any], check: Callable[[], None], poll_seconds: float = 0.2) -> None:
        self.queue = queue
        self.check = check
        self.poll_seconds = poll_seconds
        self.envstep = 0
        self.chunks_taken = 0
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=100)
        self.last_lag: LagStats | None = None

    def _take(self) -> Any:
        while True:
            item = self.queue.get(timeout=self.poll_seconds)
            if item is not None:
                return self._count(item)
            self.check()

    def _count(self, item: Any) -> Any:
        self.envstep += item.env_steps
        self.chunks_taken += 1
        self.recent_returns.extend(item.episode_returns)
        return item

    def unroll_batch(self, batch_size: int, learner_version: int) -> dict[str, Any]:
        """``batch_size`` unrolls joined on the env dim (their buffers go back to the assembler)."""
        unrolls: list[Unroll] = []
        try:
            while len(unrolls) < batch_size:
                unrolls.append(self._take())
            batch = join_unrolls(unrolls)
        finally:
            for unroll in unrolls:
                unroll.release()
        self.last_lag = LagStats.of([learner_version - u.policy_version for u in unrolls])
        return batch

    def transition_chunks(self) -> list[TransitionChunk]:
        """At least one chunk (waiting for it), and every other one already queued."""
        chunks = [self._take()]
        while True:
            item = self.queue.get(timeout=0)
            if item is None:
                return chunks
            chunks.append(self._count(item))


__all__ = ['SeedFeed']
