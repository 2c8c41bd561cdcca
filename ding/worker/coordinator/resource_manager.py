"""Which learners and collectors the coordinator may give a task to right now."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

WORKER_TYPES = ('collector', 'learner')


class NaiveResourceManager:
    """Bookkeeping of connected workers: idle ones (with the resource info they reported) and busy ones.

    ``update`` puts a worker into the idle pool, ``assign_*`` takes the worker that has been idle the
    longest (tasks spread evenly over workers, deterministically), ``release`` hands a busy worker
    back, ``delete`` forgets a worker that died or disconnected. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # worker_id -> resource info, ordered from longest idle to most recently freed
        self._idle: dict[str, OrderedDict[str, dict[str, Any]]] = {k: OrderedDict() for k in WORKER_TYPES}
        # worker_id -> (resource info, task_id)
        self._busy: dict[str, dict[str, Any]] = {k: {} for k in WORKER_TYPES}

    @staticmethod
    def _check(name: str) -> None:
        if name not in WORKER_TYPES:
            raise KeyError(f"resource manager: unknown worker type '{name}', expected one of {WORKER_TYPES}")

    def update(self, name: str, worker_id: str, resource_info: dict[str, Any]) -> None:
        """Record ``worker_id`` as connected and idle (its ``resource_info`` as reported by the 'resource' task)."""
        self._check(name)
        with self._lock:
            self._busy[name].pop(worker_id, None)
            self._idle[name].pop(worker_id, None)
            self._idle[name][worker_id] = dict(resource_info or {})

    def _assign(self, name: str, task: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            if not self._idle[name]:
                return None
            worker_id, info = self._idle[name].popitem(last=False)
            self._busy[name][worker_id] = (info, task.get('task_id'))
            return {f'{name}_id': worker_id, 'resource_info': info}

    def assign_collector(self, collector_task: dict[str, Any]) -> dict[str, Any] | None:
        """``{'collector_id', 'resource_info'}`` of the collector idle the longest, now busy; None if none is idle."""
        return self._assign('collector', collector_task)

    def assign_learner(self, learner_task: dict[str, Any]) -> dict[str, Any] | None:
        """``{'learner_id', 'resource_info'}`` of the learner idle the longest, now busy; None if none is idle."""
        return self._assign('learner', learner_task)

    def release(self, name: str, worker_id: str) -> bool:
        """A busy worker finished its task: it becomes idle again. False if it is not busy (e.g. deleted)."""
        self._check(name)
        with self._lock:
            entry = self._busy[name].pop(worker_id, None)
            if entry is None:
                return False
            self._idle[name][worker_id] = entry[0]
            return True

    def delete(self, name: str, worker_id: str) -> bool:
        """Forget a worker (dead or disconnected). True if it was known."""
        self._check(name)
        with self._lock:
            found = self._idle[name].pop(worker_id, None) is not None
            found = (self._busy[name].pop(worker_id, None) is not None) or found
            return found

    def have_assigned(self, name: str, worker_id: str) -> bool:
        """True while ``worker_id`` runs a task."""
        self._check(name)
        with self._lock:
            return worker_id in self._busy[name]

    def is_known(self, name: str, worker_id: str) -> bool:
        """True if ``worker_id`` is connected (idle or busy)."""
        self._check(name)
        with self._lock:
            return worker_id in self._idle[name] or worker_id in self._busy[name]

    def idle_count(self, name: str) -> int:
        self._check(name)
        with self._lock:
            return len(self._idle[name])

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """``{type: {'idle': [...], 'busy': {worker: task_id}}}`` for logs and tests."""
        with self._lock:
            return {
                k: {'idle': list(self._idle[k]), 'busy': {w: t for w, (_, t) in self._busy[k].items()}}
                for k in WORKER_TYPES
            }
