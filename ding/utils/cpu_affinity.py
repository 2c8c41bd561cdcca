"""Confining a thread, and every thread it starts afterwards, to some CPU cores (Linux ``sched_setaffinity``).

A thread starts with its creator's core set, so pinning the main thread before it makes the actor threads and
the env pools' worker threads confines them all. Why one would: threads that hand the GIL or an env step to
each other wake one another thousands of times a second, and on small VMs a wake-up across cores costs far
more than one on the same core (benchmarks/NOTES.md, #12 one core).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any


def cores_problem(cores: Any, key: str) -> str | None:
    """What is wrong with ``cores`` as the core ids of config key ``key``, or None."""
    if not hasattr(os, 'sched_setaffinity'):
        return f'{key}: confining threads to cores needs Linux (os.sched_setaffinity); leave it None here'
    if (
        not isinstance(cores, (list, tuple))
        or not cores
        or not all(isinstance(c, int) and not isinstance(c, bool) for c in cores)
    ):
        return f'{key}: expected a non-empty list of CPU core ids (e.g. [0]) or None, got {cores!r}'
    allowed = os.sched_getaffinity(0)
    outside = sorted(set(cores) - allowed)
    if outside:
        return f'{key}: cores {outside} are not among the cores this process may use {sorted(allowed)}'
    return None


def pin_calling_thread(cores: Sequence[int]) -> Callable[[], None]:
    """Confine the calling thread (and the threads it starts from now on) to ``cores``; returns the function
    that gives the calling thread its previous cores back (threads started meanwhile keep ``cores``)."""
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cores))

    def restore() -> None:
        os.sched_setaffinity(0, previous)

    return restore


__all__ = ['cores_problem', 'pin_calling_thread']
