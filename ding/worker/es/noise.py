"""The ES noise table as a worker process sees it: built from a spec received from the learner, bounded, shared.

The table itself (``NoiseTable``: seed + size -> the same float32 draws everywhere, ``noise_id`` -> a slice) is in
``ding.rl_utils.es`` so that the policy, a layer below the workers, uses the same class. Here: checking a spec that
came over the network before allocating anything, and one table per ``(seed, size)`` per process, so many
rollouts in one process (tests, a fake-worker harness) share it instead of each holding its own copy.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Any

from ding.rl_utils.es import NoiseTable

# 32 Mi floats = 128 MiB: far above what an ES run on a small machine needs (the default is 4 Mi), and a cap on
# what a spec from a peer can make this process allocate.
MAX_NOISE_TABLE_SIZE = 1 << 25
NOISE_SPEC_KEYS = ('seed', 'size')

__all__ = ['MAX_NOISE_TABLE_SIZE', 'NoiseTable', 'check_noise_spec', 'noise_table_from_spec', 'shared_noise_table']

_build_lock = threading.Lock()


def check_noise_spec(spec: Any, where: str = 'noise spec') -> tuple[int, int]:
    """``(seed, size)`` from ``{'seed': int >= 0, 'size': int in [1, MAX_NOISE_TABLE_SIZE]}``, or a ValueError
    naming ``where`` and the bad field."""
    if not isinstance(spec, Mapping):
        raise ValueError(f'{where}: expected a dict with keys {list(NOISE_SPEC_KEYS)}, got {type(spec).__name__}')
    unknown = sorted(set(spec) - set(NOISE_SPEC_KEYS))
    missing = [k for k in NOISE_SPEC_KEYS if k not in spec]
    if unknown or missing:
        raise ValueError(f'{where}: unknown keys {unknown}, missing keys {missing}')
    seed, size = spec['seed'], spec['size']
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f'{where}.seed: expected an int in [0, 2**63), got {seed!r}')
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_NOISE_TABLE_SIZE:
        raise ValueError(f'{where}.size: expected an int in [1, {MAX_NOISE_TABLE_SIZE}], got {size!r}')
    return seed, size


@functools.lru_cache(maxsize=2)
def _cached_table(seed: int, size: int) -> NoiseTable:
    return NoiseTable(seed, size)


def shared_noise_table(seed: int, size: int) -> NoiseTable:
    """This process's table for ``(seed, size)``, built on first use (a few tens of ms for 4 Mi floats)."""
    check_noise_spec({'seed': seed, 'size': size})
    with _build_lock:  # two threads asking at once build it once
        return _cached_table(seed, size)


def noise_table_from_spec(spec: Any, where: str = 'noise spec') -> NoiseTable:
    """The shared table described by a (checked) ``{'seed', 'size'}`` spec."""
    return shared_noise_table(*check_noise_spec(spec, where))
