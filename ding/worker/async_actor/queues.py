"""The two queues of the async pipeline: the trajectory queue (actors -> learner) and the staging queue
(learner -> actors: the newest weights).

Both are closable: ``close()`` wakes every waiting thread, which then gets :class:`QueueClosed`, so that a
stopping pipeline never leaves a thread blocked on a queue.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Generic, TypeVar

Item = TypeVar('Item')


class QueueClosed(Exception):
    """The queue was closed while (or before) a thread waited on it."""


class TrajectoryQueue(Generic[Item]):
    """A bounded FIFO. ``put`` waits while it is full (back-pressure on the actors) unless the queue drops
    when full, in which case the new item is refused and counted in ``dropped``."""

    def __init__(self, maxsize: int, drop_when_full: bool = False) -> None:
        if maxsize < 1:
            raise ValueError(f'TrajectoryQueue: maxsize must be >= 1, got {maxsize}')
        self.maxsize = maxsize
        self.drop_when_full = drop_when_full
        self.dropped = 0
        self.put_wait_seconds = 0.0  # total time actors spent waiting for room (back-pressure)
        self._items: collections.deque[Item] = collections.deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._closed = False

    def put(self, item: Item) -> bool:
        """Append ``item``; False when it was dropped (a full queue that drops). Raises QueueClosed."""
        with self._lock:
            if self._closed:
                raise QueueClosed('trajectory queue closed')
            if len(self._items) >= self.maxsize:
                if self.drop_when_full:
                    self.dropped += 1
                    return False
                t0 = time.perf_counter()
                while len(self._items) >= self.maxsize and not self._closed:
                    self._not_full.wait()
                self.put_wait_seconds += time.perf_counter() - t0
                if self._closed:
                    raise QueueClosed('trajectory queue closed')
            self._items.append(item)
            self._not_empty.notify()
            return True

    def get(self, timeout: float | None = None) -> Item | None:
        """The oldest item; None when ``timeout`` seconds passed with the queue empty. Raises QueueClosed."""
        with self._lock:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._items:
                if self._closed:
                    raise QueueClosed('trajectory queue closed')
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._not_empty.wait(remaining)
            item = self._items.popleft()
            self._not_full.notify()
            return item

    def qsize(self) -> int:
        with self._lock:
            return len(self._items)

    def drain(self) -> list[Item]:
        """Take every waiting item (at shutdown, to release their buffers)."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
            self._not_full.notify_all()
            return items

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed


class StagingQueue:
    """The newest ``maxsize`` (1 or 2) published weight copies, each with its version.

    ``publish`` never blocks: it replaces the oldest unconsumed copy when full. ``newest(held)`` gives
    the newest copy newer than the version a caller holds, or None at once when there is none; only a
    caller holding nothing yet (``held`` None) waits for the first copy.
    """

    def __init__(self, maxsize: int = 1) -> None:
        if maxsize not in (1, 2):
            raise ValueError(f'StagingQueue: maxsize must be 1 or 2, got {maxsize}')
        self.maxsize = maxsize
        self.replaced = 0  # copies replaced before any actor took them
        self._copies: collections.deque[tuple[int, Any]] = collections.deque(maxlen=maxsize)
        self._taken_versions: set[int] = set()
        self._cond = threading.Condition()
        self._closed = False

    def publish(self, version: int, weights: Any) -> None:
        with self._cond:
            if len(self._copies) == self.maxsize and self._copies[0][0] not in self._taken_versions:
                self.replaced += 1
            self._copies.append((version, weights))
            self._taken_versions &= {v for v, _ in self._copies}
            self._cond.notify_all()

    def newest(self, held: int | None, timeout: float | None = None) -> tuple[int, Any] | None:
        """``(version, weights)`` newer than ``held``; None when there is none (no waiting when ``held`` is
        set; with ``held`` None, waits up to ``timeout`` for the first copy). Raises QueueClosed."""
        with self._cond:
            if held is None:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._copies and not self._closed:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return None
                    self._cond.wait(remaining)
            if self._closed:
                raise QueueClosed('staging queue closed')
            if not self._copies:
                return None
            version, weights = self._copies[-1]
            if held is not None and version <= held:
                return None
            self._taken_versions.add(version)
            return version, weights

    def latest_version(self) -> int | None:
        with self._cond:
            return self._copies[-1][0] if self._copies else None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


__all__ = ['QueueClosed', 'TrajectoryQueue', 'StagingQueue']
