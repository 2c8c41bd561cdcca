"""What a running training may change: the tunable keys, their bounds and how one key is read and set."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ding.config.bounds import BOUNDS
from ding.config.interval import Interval

TuneCheck = Callable[[Any, Mapping[str, Any]], 'str | None']

# Keys a running training may change, with the cap applied on top of the config bound of the same key in
# ding.config.bounds.BOUNDS (a tune is a live change: it gets a tighter, sane range than a config file).
# A key missing from BOUNDS takes its kind from here ('int' or 'number').
TUNE_LIMITS: dict[str, tuple[str, str]] = {
    'learning_rate': ('number', '(0, 1]'),
    'entropy_weight': ('number', '[0, 1]'),
    'value_weight': ('number', '[0, 10]'),
    'update_per_collect': ('int', '[1, 1000]'),
    'batch_size': ('int', '[1, 65536]'),
    'eps.start': ('number', '[0, 1]'),
    'eps.end': ('number', '[0, 1]'),
    'eps.decay': ('int', '[1, 1e9]'),
    # parallel mode: the coordinator's pacing (samples collectors may hand over per learner iteration)
    'max_samples_per_iter': ('number', '(0, 1e6]'),
}
# Config paths accepted for a key (``policy.learn.learning_rate`` names ``learning_rate``).
_PREFIXES = ('policy.learn.', 'policy.other.', 'learn.', 'other.')


def tune_bounds() -> dict[str, tuple[str, Interval]]:
    """``{key: (kind, interval)}`` of every tunable key: the config bound narrowed by ``TUNE_LIMITS``."""
    out = {}
    for key, (kind, limit) in TUNE_LIMITS.items():
        interval = Interval.parse(limit)
        if key in BOUNDS:
            kind = BOUNDS[key][0]
            interval = Interval.parse(BOUNDS[key][1]).intersect(interval)
        out[key] = (kind, interval)
    return out


class TuneError(ValueError):
    """A tune request refused before anything changed. ``reason``: unknown_key, wrong_type, out_of_range,
    not_supported or invalid; ``key`` and ``bound`` name what was wrong."""

    def __init__(
        self,
        message: str,
        reason: str,
        key: str | None = None,
        bound: str | None = None,
        problems: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.key = key
        self.bound = bound
        self.problems = problems or []


def canonical_key(key: str) -> str:
    """``policy.learn.learning_rate`` -> ``learning_rate``; other names are returned unchanged."""
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def check_tune_value(key: str, value: Any, bounds: dict[str, tuple[str, Interval]] | None = None) -> Any:
    """``value`` converted for ``key`` (ints for int keys); ``TuneError`` naming the key and the bound."""
    bounds = bounds if bounds is not None else tune_bounds()
    if key not in bounds:
        raise TuneError(f"unknown tune key '{key}'; tunable keys: {sorted(bounds)}", 'unknown_key', key)
    kind, interval = bounds[key]
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == 'int':
        if not is_number or (isinstance(value, float) and not value.is_integer()):
            raise TuneError(
                f'{key}: expected an integer, got {type(value).__name__} {value!r}', 'wrong_type', key, str(interval)
            )
        value = int(value)
    elif not is_number:
        raise TuneError(
            f'{key}: expected a number, got {type(value).__name__} {value!r}', 'wrong_type', key, str(interval)
        )
    if (isinstance(value, float) and math.isnan(value)) or value not in interval:
        raise TuneError(f'{key} = {value!r} is out of range: must be in {interval}', 'out_of_range', key, str(interval))
    return value


@dataclass
class Tunable:
    """How the run reads and changes one key. ``check(value, pending)`` may refuse a value that is in range
    but wrong for this run (``pending``: the other values of the same request); it returns a message."""

    getter: Callable[[], Any]
    setter: Callable[[Any], None]
    check: TuneCheck | None = None


__all__ = ['TUNE_LIMITS', 'TuneCheck', 'TuneError', 'Tunable', 'canonical_key', 'check_tune_value', 'tune_bounds']
