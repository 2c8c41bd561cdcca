"""What a finished collect task leaves running for the next one: its envs, policy and serial collector.

A collect task of the parallel pipeline is short (``n_sample`` samples over all envs, e.g. 32 steps per
env). If every task started from freshly reset envs, no training episode would ever get past that many
steps, and the replay buffer would hold only the first steps of episodes. So a comm collector keeps the
resources of its last collect task, and the next task with the same env and policy configuration goes on
from where the envs stopped: episodes run across tasks, as in the serial pipeline.
"""

from __future__ import annotations

import threading
from typing import Any


class KeptResources:
    """At most one finished task's resources, under a key naming the configuration they were built for.

    ``keep(key, resources)`` stores them (closing whatever was kept before); ``take(key)`` hands them to the
    next task if the key matches, and closes them if it does not (they would never be used); ``close()``
    closes what is kept, and anything kept afterwards is closed at once. ``resources`` only needs ``close()``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: str | None = None
        self._resources: Any = None
        self._closed = False

    def keep(self, key: str, resources: Any) -> None:
        with self._lock:
            if self._closed:
                old, resources = resources, None
            else:
                old = self._resources
                self._key, self._resources = key, resources
        if old is not None:
            old.close()

    def take(self, key: str) -> Any:
        with self._lock:
            resources, kept_key = self._resources, self._key
            self._key, self._resources = None, None
        if resources is None or kept_key == key:
            return resources
        resources.close()
        return None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            resources, self._key, self._resources = self._resources, None, None
        if resources is not None:
            resources.close()

    @property
    def holding(self) -> bool:
        """Whether resources are kept now."""
        return self._resources is not None


__all__ = ['KeptResources']
