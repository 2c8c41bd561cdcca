"""Exploration schedules."""
from __future__ import annotations

import math
from typing import Callable


def get_epsilon_greedy_fn(start: float, end: float, decay: int, type_: str = 'exp') -> Callable[[int], float]:
    """Epsilon as a function of a step counter (usually env steps).

    - ``'exp'``: ``end + (start - end) * exp(-step / decay)``
    - ``'linear'``: from ``start`` at step 0 to ``end`` at step ``decay``, then held at ``end``.
    """
    if type_ not in ('exp', 'linear'):
        raise ValueError(f"epsilon schedule: type must be 'exp' or 'linear', got {type_!r}")
    if decay <= 0:
        raise ValueError(f"epsilon schedule: decay must be > 0, got {decay}")
    if type_ == 'exp':
        return lambda step: end + (start - end) * math.exp(-step / decay)

    def linear(step: int) -> float:
        if step >= decay:
            return end
        return start + (end - start) * max(step, 0) / decay

    return linear
