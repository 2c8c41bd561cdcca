"""What the ES server counts: one counter per event of the learner-event table (read from any thread)."""

from __future__ import annotations

import collections
import threading
import time

# name -> what it counts (the Prometheus help text of ``es_<name>``)
ES_COUNTERS = {
    'connected_workers': 'ES workers connected now',
    'initialised_workers': 'ES workers initialised now',
    'partials_received': 'Episode returns turned into gradient partials',
    'partials_per_second': 'Gradient partials received per second (last 10 s)',
    'dropped_partials': 'Partials dropped because both buffers were full (the update is slower than the workers)',
    'stale_partials': 'Returns dropped by the staleness rule (computed for a model too old)',
    'skipped_model_updates': 'Model updates a worker skipped (its download of a recent model was in progress)',
    'download_resets': 'Downloads restarted with the newest model (the model in transfer became very old)',
    'downloads_completed': 'Model downloads completed',
    'bytes_sent': 'Model bytes sent to workers',
    'init_timeouts': 'Workers disconnected for not asking for initialisation in time',
    'invalid_packets': 'Invalid packets (bad frame, MAC, schema or size)',
    'unknown_packets': 'Valid packets of an unknown type',
    'model_updates': 'Model updates published to the workers',
    'env_steps': 'Env steps the workers reported',
    'disconnects': 'Workers disconnected (for any reason)',
}


class ESServerStats:
    """Counters the server's event loop updates (one writer) and any thread reads (``snapshot()``)."""

    def __init__(self, rate_window: float = 10.0) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(ES_COUNTERS, 0)
        self._partial_times: collections.deque[float] = collections.deque()
        self._rate_window = rate_window

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount
            if name == 'partials_received':
                now = time.monotonic()
                self._partial_times.append(now)
                while self._partial_times and self._partial_times[0] < now - self._rate_window:
                    self._partial_times.popleft()

    def __getitem__(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    @property
    def envstep(self) -> int:
        """Env steps the workers reported (the run's env-step count)."""
        return self['env_steps']

    @envstep.setter
    def envstep(self, value: int) -> None:
        """Continue counting from ``value`` (a resumed run's env steps)."""
        with self._lock:
            self._counts['env_steps'] = int(value)

    def snapshot(self) -> dict[str, float]:
        """Every counter of ``ES_COUNTERS`` (``partials_per_second`` over the last ``rate_window`` seconds)."""
        with self._lock:
            counts = {k: float(v) for k, v in self._counts.items()}
            now = time.monotonic()
            recent = sum(1 for t in self._partial_times if t >= now - self._rate_window)
        counts['partials_per_second'] = recent / self._rate_window
        return counts


__all__ = ['ES_COUNTERS', 'ESServerStats']
