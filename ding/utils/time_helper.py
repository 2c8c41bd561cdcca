"""Small timing helpers."""

from __future__ import annotations

import os
import time


class EasyTimer:
    """Context manager measuring wall time: ``with timer: ...`` then read ``timer.value`` (seconds)."""

    def __init__(self) -> None:
        self.value = 0.0
        self._start = 0.0

    def __enter__(self) -> EasyTimer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.value = time.perf_counter() - self._start


# When this module was first imported: the fallback start of the process where /proc cannot tell it.
_IMPORTED_AT = time.time()
_last_run_end: float | None = None


def process_start_time() -> float:
    """The Unix time this process started (interpreter start-up and imports included), from ``/proc`` on Linux;
    elsewhere the time ``ding.utils.time_helper`` was first imported (the ``ding`` command imports it at once)."""
    try:
        with open('/proc/self/stat') as f:
            # Fields after the command name (which may hold spaces): starttime is the 22nd field overall.
            fields = f.read().rsplit(')', 1)[1].split()
        with open('/proc/uptime') as f:
            uptime = float(f.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf('SC_CLK_TCK')
    except (OSError, ValueError, IndexError):
        return _IMPORTED_AT
    return time.time() - max(age, 0.0)


def run_origin() -> float:
    """Where a run's wall time starts: the process start, or the end of the previous run of this process (a
    second seed of ``ding -s 0 -s 1``, a second pipeline call from Python)."""
    start = process_start_time()
    return start if _last_run_end is None else max(start, _last_run_end)


def mark_run_end(when: float | None = None) -> None:
    """The run of this process ended (at ``when``, default now): the next run's wall time starts here."""
    global _last_run_end
    _last_run_end = time.time() if when is None else when
