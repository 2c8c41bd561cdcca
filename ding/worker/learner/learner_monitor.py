"""``LearnerMonitor``: running sums of a learner's scalar log values between two log shows."""

from __future__ import annotations

from time import perf_counter
from typing import Any


class LearnerMonitor:
    """Per-key running sums of the scalar log values since the last log show."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.iters = 0
        self.since = perf_counter()

    def update(self, scalars: dict[str, Any]) -> None:
        """Add one iteration's scalar values (non-numbers are skipped)."""
        sums, counts = self.sums, self.counts
        for k, v in scalars.items():
            if v.__class__ is float or v.__class__ is int:  # the common case, without isinstance chains
                sums[k] = sums.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
        self.iters += 1

    def avg(self, key: str) -> float:
        """Mean of ``key`` since the last ``clear()``; KeyError when it was never reported."""
        return self.sums[key] / self.counts[key]

    def averages(self, keys: list[str] | None = None) -> dict[str, float]:
        keys = list(self.sums) if keys is None else keys
        return {k: self.sums[k] / self.counts[k] for k in keys if self.counts.get(k)}

    def clear(self, since: float | None = None) -> None:
        """Start a new window (at ``since``, a ``perf_counter()`` value, default now)."""
        self.sums.clear()
        self.counts.clear()
        self.iters = 0
        self.since = perf_counter() if since is None else since


__all__ = ['LearnerMonitor']
