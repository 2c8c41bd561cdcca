"""Running mean / variance of a stream of values (used to normalise value targets)."""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Mean and variance over every value seen, merged batch by batch (Chan et al.'s parallel update)."""

    def __init__(self, epsilon: float = 1e-4) -> None:
        self._epsilon = epsilon
        self.reset()

    def reset(self) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, self._epsilon

    def update(self, x) -> None:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        if x.size == 0:
            return
        b_mean, b_var, b_count = float(x.mean()), float(x.var()), x.size
        delta = b_mean - self.mean
        total = self.count + b_count
        self.mean += delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.var = m2 / total
        self.count = total

    @property
    def std(self) -> float:
        return float(np.sqrt(self.var) + 1e-8)

    def state_dict(self) -> dict[str, float]:
        return {'mean': self.mean, 'var': self.var, 'count': self.count}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.mean, self.var, self.count = float(state['mean']), float(state['var']), float(state['count'])
