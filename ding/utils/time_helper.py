"""Small timing helpers."""

from __future__ import annotations

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
