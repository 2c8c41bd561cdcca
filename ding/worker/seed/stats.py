"""What the inference server measures: batch sizes, queueing delay and request latency (p50 / p99)."""

from __future__ import annotations

import collections
import threading

import numpy as np


class InferenceStats:
    """Counters the server thread updates and any thread reads (``snapshot()``).

    Latency of a request: from the server reading the actor's ``STEP`` to writing its ``ACT``; queueing delay:
    from that read to the start of the forward that answered it. Percentiles cover the last ``window`` requests.
    """

    def __init__(self, window: int = 4096) -> None:
        self._lock = threading.Lock()
        self._latency_us: collections.deque[float] = collections.deque(maxlen=window)
        self._batches = 0
        self._batched_obs = 0
        self._requests = 0
        self._actor_requests: collections.Counter[int] = collections.Counter()
        self._queue_delay_us = 0.0
        self.dropped_actors = 0  # actors that left (closed, crashed, hung or broke the protocol)
        self.hung_actors = 0
        self.refused_joins = 0
        self.bad_messages = 0  # remote messages that failed validation (their actor dropped) or came unasked

    def count_refused_join(self) -> None:
        """One join refused (handshakes run on threads of their own: counted under the lock)."""
        with self._lock:
            self.refused_joins += 1

    def count_bad_message(self) -> None:
        with self._lock:
            self.bad_messages += 1

    def record_batch(
        self, observations: int, queue_delays_us: list[float], latencies_us: list[float], actor_ids: list[int]
    ) -> None:
        """One forward of ``observations`` that answered the requests of ``actor_ids``."""
        with self._lock:
            self._actor_requests.update(actor_ids)
            self._batches += 1
            self._batched_obs += observations
            self._requests += len(latencies_us)
            self._queue_delay_us += sum(queue_delays_us)
            self._latency_us.extend(latencies_us)

    def requests_of(self, actor_id: int) -> int:
        """Requests of ``actor_id`` answered so far (over all its joins)."""
        with self._lock:
            return self._actor_requests[actor_id]

    def snapshot(self) -> dict[str, float]:
        """``inference_batch_mean`` (observations per forward), ``queue_delay_us_mean``, ``latency_us_p50`` /
        ``_p99`` and the counts."""
        with self._lock:
            latency = np.fromiter(self._latency_us, dtype=np.float64)
            batches, obs, requests, delay = self._batches, self._batched_obs, self._requests, self._queue_delay_us
        nan = float('nan')
        return {
            'inference_batches': float(batches),
            'inference_requests': float(requests),
            'inference_batch_mean': obs / batches if batches else nan,
            'queue_delay_us_mean': delay / requests if requests else nan,
            'latency_us_p50': float(np.percentile(latency, 50)) if latency.size else nan,
            'latency_us_p99': float(np.percentile(latency, 99)) if latency.size else nan,
            'dropped_actors': float(self.dropped_actors),
            'hung_actors': float(self.hung_actors),
            'refused_joins': float(self.refused_joins),
            'bad_messages': float(self.bad_messages),
        }


__all__ = ['InferenceStats']
