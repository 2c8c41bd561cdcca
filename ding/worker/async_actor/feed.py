"""The learner's side of the trajectory queue: batches of unrolls, env steps, and policy lag."""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .actor_pool import ActorPool
from .queues import QueueClosed
from .trajectory import Unroll, join_unrolls


@dataclass
class LagStats:
    """Policy lag of a batch's unrolls: learner version minus the version each was collected with."""

    min: float
    mean: float
    max: float

    @classmethod
    def of(cls, lags: list[int]) -> LagStats:
        return cls(float(min(lags)), sum(lags) / len(lags), float(max(lags)))

    def scalars(self) -> dict[str, float]:
        return {'policy_lag_min': self.min, 'policy_lag_mean': self.mean, 'policy_lag_max': self.max}


class LearnerFeed:
    """Takes unrolls off the pool's trajectory queue and joins ``batch_size`` of them into a learner batch.

    ``updates_per_batch`` > 1 lets the learner train on the newest batch again (up to that many times in
    all) while fewer than ``batch_size`` new unrolls are waiting, instead of blocking. ``envstep`` counts
    the env steps of every unroll taken (a checkpoint saves it as the collector's env steps). ``check`` runs
    whenever a wait of ``poll_seconds`` finds the queue empty, after the actors' health check (it may raise to
    stop waiting, e.g. on a stop request).
    """

    def __init__(
        self,
        pool: ActorPool,
        updates_per_batch: int = 1,
        poll_seconds: float = 0.2,
        check: Callable[[], None] | None = None,
    ) -> None:
        self.pool = pool
        self.check = check
        self.updates_per_batch = updates_per_batch
        self.poll_seconds = poll_seconds
        self.envstep = 0
        self.unrolls_taken = 0
        self.reused_batches = 0
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=100)
        self.last_lag: LagStats | None = None  # of the newest batch
        self._last: tuple[dict[str, Any], list[int]] | None = None
        self._uses = 0

    def next_batch(self, batch_size: int, learner_version: int) -> tuple[dict[str, Any], LagStats]:
        """The next batch and its policy lag at ``learner_version``. Raises ``ActorError`` when an actor
        failed, ``QueueClosed`` when the pool was stopped."""
        trajectories = self.pool.trajectories
        if self._last is not None and self._uses < self.updates_per_batch and trajectories.qsize() < batch_size:
            self._uses += 1
            self.reused_batches += 1
            batch, versions = self._last
            self.last_lag = LagStats.of([learner_version - v for v in versions])
            return batch, self.last_lag
        unrolls: list[Unroll] = []
        try:
            while len(unrolls) < batch_size:
                unroll = self._take()
                unrolls.append(unroll)
            batch = join_unrolls(unrolls)
        finally:
            for unroll in unrolls:
                unroll.release()
        versions = [u.policy_version for u in unrolls]
        for unroll in unrolls:
            self.envstep += unroll.env_steps
            self.recent_returns.extend(unroll.episode_returns)
        self.unrolls_taken += len(unrolls)
        self._last, self._uses = (batch, versions), 1
        self.last_lag = LagStats.of([learner_version - v for v in versions])
        return batch, self.last_lag

    def _take(self) -> Unroll:
        while True:
            try:
                unroll = self.pool.trajectories.get(timeout=self.poll_seconds)
            except QueueClosed:
                self.pool.check()  # an actor failure closed it: raise that, with its traceback
                raise
            if unroll is not None:
                return unroll
            self.pool.check()
            if self.check is not None:
                self.check()


__all__ = ['LearnerFeed', 'LagStats']
