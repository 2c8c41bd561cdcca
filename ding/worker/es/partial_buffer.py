"""The double-buffered gradient-partial buffer of the ES server, and a thread that runs the updates.

The server's event loop fills one buffer of ``capacity`` partials. When it is full and no update is running,
it is handed (a one-slot hand-off) to the update, which runs on another thread, and a fresh buffer starts.
When it is full while the previous update still runs, both buffers are full: each further partial is dropped
(the caller warns and counts). The update ends with ``update_done()`` (a new model was published); a buffer
that filled meanwhile is handed over at once.
"""

from __future__ import annotations

import enum
import queue
import threading
from collections.abc import Callable
from typing import Any


class Added(enum.Enum):
    ADDED = 'added'
    HANDED_OFF = 'handed_off'  # the buffer filled and went to the update
    DROPPED = 'dropped'  # both buffers full: the update is slower than the workers


class PartialBuffer:
    """Partials for the current model. ``add`` and ``update_done`` run on the server's loop (one thread);
    ``take`` on the update's thread."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f'PartialBuffer: capacity must be >= 1, got {capacity}')
        self.capacity = capacity
        self._filling: list[Any] = []
        self._handoff: queue.Queue[list[Any]] = queue.Queue(maxsize=1)
        self._update_running = False

    def __len__(self) -> int:
        return len(self._filling)

    @property
    def update_running(self) -> bool:
        return self._update_running

    def add(self, partial: Any) -> Added:
        if len(self._filling) >= self.capacity:
            return Added.DROPPED
        self._filling.append(partial)
        if len(self._filling) == self.capacity and not self._update_running:
            self._hand_off()
            return Added.HANDED_OFF
        return Added.ADDED

    def update_done(self) -> bool:
        """The running update finished; whether a buffer that filled meanwhile went to the next one."""
        self._update_running = False
        if len(self._filling) >= self.capacity:
            self._hand_off()
            return True
        return False

    def _hand_off(self) -> None:
        self._update_running = True
        self._handoff.put_nowait(self._filling)  # never blocks: one update runs at a time
        self._filling = []

    def take(self, timeout: float | None = None) -> list[Any] | None:
        """The next full buffer (None after ``timeout`` seconds without one)."""
        try:
            return self._handoff.get(timeout=timeout)
        except queue.Empty:
            return None


class UpdateThread(threading.Thread):
    """Runs ``update(partials)`` on every buffer ``take`` hands over until ``stop()``; ``update`` must end by
    publishing the new model (which calls the buffer's ``update_done``). ``error`` holds what ended it."""

    def __init__(self, take: Callable[[float], list[Any] | None], update: Callable[[list[Any]], None]) -> None:
        super().__init__(name='ding-es-update', daemon=True)
        self._take = take
        self._update = update
        self._stop_event = threading.Event()
        self.updates = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                partials = self._take(0.1)
                if partials is not None:
                    self._update(partials)
                    self.updates += 1
        except BaseException as exc:
            self.error = exc

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)


__all__ = ['Added', 'PartialBuffer', 'UpdateThread']
