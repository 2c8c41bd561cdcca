"""The learner's side of the replay service: ``BatchPrefetcher`` keeps sampled batches decoded and collated in a
bounded queue, so the training loop does not wait on the network, and reports its state (``ok``, ``waiting``,
``degraded``: the learner pauses while degraded).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import torch

from .client import Backoff, ReplayClient, ReplayError, describe, is_fatal
from .codec import Encoding, EncodingError, decode_batch
from .v1 import replay_pb2

# The prefetcher's states (the learner pauses while it is 'degraded').
OK, WAITING, DEGRADED = 'ok', 'waiting', 'degraded'
STATES = (OK, WAITING, DEGRADED)


@dataclass
class SampledBatch:
    """One decoded, collated batch: field -> tensor ``[size, *shape]``, plus ``replay_unique_id`` and
    ``replay_buffer_idx`` (lists) and ``IS`` (float32 tensor ``[size]``), as a policy's learn mode takes it."""

    data: dict[str, Any]
    size: int
    latency: float


class BatchPrefetcher:
    """Keeps up to ``prefetch_depth`` sampled batches decoded in a bounded queue, filled by two threads.

    The training loop takes batches with ``get``. Up to ``prefetch_depth`` batches wait ready, and one call's
    batches may be on their way besides: a learner that falls behind fills the queue, which stops the calls until
    it takes batches (at most ``prefetch_depth + batches_per_call`` batches exist at any time). One call draws
    ``batches_per_call`` batches (default ``prefetch_depth``), which spreads the cost of a call over several
    batches. Errors are retried with backoff and jitter; after ``degraded_after`` consecutive failures
    ``state`` becomes ``'degraded'`` until a call succeeds again. ``'waiting'`` means the service answers but
    cannot serve a batch yet. Observers (``observe(status, seconds)``) are told of every call (status: 'ok',
    'empty', 'error').
    """

    def __init__(
        self,
        client: ReplayClient,
        batch_size: int,
        prefetch_depth: int = 4,
        learner_iter: Callable[[], int] = lambda: -1,
        expected: Encoding | None = None,
        degraded_after: int = 3,
        backoff: Backoff | None = None,
        empty_wait: float = 0.02,
        observe: Callable[[str, float], None] | None = None,
        on_state: Callable[[str, str], None] | None = None,
        batches_per_call: int | None = None,
    ) -> None:
        per_call = prefetch_depth if batches_per_call is None else batches_per_call
        if prefetch_depth < 1 or batch_size < 1 or degraded_after < 1 or not 1 <= per_call <= prefetch_depth:
            raise ValueError(
                f'BatchPrefetcher: prefetch_depth, batch_size and degraded_after must be >= 1 and batches_per_call '
                f'in [1, prefetch_depth], got {prefetch_depth}, {batch_size}, {degraded_after}, {per_call}'
            )
        self.client = client
        self.batch_size = int(batch_size)
        self.prefetch_depth = int(prefetch_depth)
        self.batches_per_call = int(per_call)
        self._learner_iter = learner_iter
        self._expected = expected
        self._degraded_after = int(degraded_after)
        self._backoff = backoff or Backoff()
        self._empty_wait = float(empty_wait)
        # told of every call (status, seconds) / of every state change (before, after); more may be added
        self.observers: list[Callable[[str, float], None]] = [observe] if observe else []
        self.state_listeners: list[Callable[[str, str], None]] = [on_state] if on_state else []
        # prefetch_depth batches ready, and one call's batches on their way besides
        self._queue: queue.Queue[SampledBatch] = queue.Queue(maxsize=self.prefetch_depth + self.batches_per_call)
        self._free = self.prefetch_depth + self.batches_per_call  # batches that may still be fetched
        self._slots = threading.Condition()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None
        self.state = WAITING
        self.consecutive_failures = 0
        self.last_error = ''

    # ---- control -------------------------------------------------------------------------------------
    def start(self) -> BatchPrefetcher:
        """Start the fetching threads (two, so one call's latency overlaps another's decoding)."""
        if not self._threads:
            for i in range(2):
                thread = threading.Thread(target=self._run, name=f'replay-prefetch-{i}', daemon=True)
                thread.start()
                self._threads.append(thread)
        return self

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.client.timeout + 1)
        self._threads = []

    def qsize(self) -> int:
        return self._queue.qsize()

    def get(self, timeout: float | None = None) -> SampledBatch | None:
        """The next batch, or None after ``timeout`` seconds without one; raises ``ReplayError`` when the
        service refused the client for good."""
        if self._error is not None:
            raise ReplayError(str(self._error))
        try:
            batch = self._queue.get(timeout=timeout) if timeout else self._queue.get_nowait()
        except queue.Empty:
            if self._error is not None:
                raise ReplayError(str(self._error)) from None
            return None
        self._release(1)
        return batch

    # ---- the threads ---------------------------------------------------------------------------------
    def _take(self, n: int) -> bool:
        with self._slots:
            if not self._slots.wait_for(lambda: self._free >= n, timeout=0.1):
                return False
            self._free -= n
            return True

    def _release(self, n: int) -> None:
        with self._slots:
            self._free += n
            self._slots.notify_all()

    def _set_state(self, state: str) -> None:
        if state != self.state:
            before, self.state = self.state, state
            for listener in self.state_listeners:
                listener(before, state)

    def _note(self, status: str, seconds: float) -> None:
        for observer in self.observers:
            observer(status, seconds)

    def _run(self) -> None:
        while not self._stop.is_set() and self._error is None:
            count = self.batches_per_call
            if not self._take(count):  # backpressure: the batches ready and coming fill prefetch_depth
                continue
            batches = self._fetch(count)
            for batch in batches:
                self._queue.put(batch)  # never blocks: a slot was taken for it
            self._release(count - len(batches))

    def _fetch(self, count: int) -> list[SampledBatch]:
        t0 = time.perf_counter()
        batch_size = self.batch_size
        try:
            response = self.client.sample_raw(batch_size, self._learner_iter(), count)
        except grpc.RpcError as exc:
            self._note('error', time.perf_counter() - t0)
            self.last_error = describe(exc)
            if is_fatal(exc):
                self._error = ReplayError(f'replay service at {self.client.address}: {self.last_error}')
                return []
            with self._lock:
                self.consecutive_failures += 1
                failures = self.consecutive_failures
                if failures >= self._degraded_after:
                    self._set_state(DEGRADED)
            self._stop.wait(self._backoff.delay(failures))
            return []
        with self._lock:
            self.consecutive_failures = 0
        if not response.ready:
            self._note('empty', time.perf_counter() - t0)
            with self._lock:
                self._set_state(WAITING)
            self._stop.wait(self._empty_wait)
            return []
        try:
            data = self._decode(response, batch_size, count)
        except (EncodingError, ValueError) as exc:
            self._error = ReplayError(f'replay service at {self.client.address} sent a bad batch: {exc}')
            return []
        seconds = time.perf_counter() - t0
        self._note('ok', seconds)
        with self._lock:
            self._set_state(OK)
        return [SampledBatch(part, batch_size, seconds) for part in _split(data, batch_size)]

    def _decode(self, response: replay_pb2.SampleResponse, batch_size: int, count: int) -> dict[str, Any]:
        size = response.batch.size
        n_ids, n_idx, n_is = len(response.replay_unique_id), len(response.replay_buffer_idx), len(response.is_weight)
        if not n_ids == n_idx == n_is == size or not 0 < size <= batch_size * count or size % batch_size:
            raise EncodingError(
                f'asked for at most {count} batches of {batch_size} items, got a batch of {size} '
                f'with {n_ids} ids, {n_idx} slots, {n_is} weights'
            )
        # already collated: what default_collate makes of the same items (tensors stacked on a leading dim)
        data: dict[str, Any] = dict(decode_batch(response.batch, self._expected))
        data['replay_unique_id'] = list(response.replay_unique_id)
        data['replay_buffer_idx'] = list(response.replay_buffer_idx)
        data['IS'] = torch.tensor(response.is_weight, dtype=torch.float32)
        return data


def _split(data: dict[str, Any], batch_size: int) -> list[dict[str, Any]]:
    """``data`` (collated, a multiple of ``batch_size`` items) cut into batches of ``batch_size`` (views)."""
    n = len(data['replay_unique_id']) // batch_size
    if n == 1:
        return [data]
    parts: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in data.items():
        pieces = (
            value.split(batch_size)
            if isinstance(value, torch.Tensor)
            else [value[i * batch_size : (i + 1) * batch_size] for i in range(n)]
        )
        for part, piece in zip(parts, pieces):
            part[key] = piece
    return parts


__all__ = ['OK', 'WAITING', 'DEGRADED', 'STATES', 'BatchPrefetcher', 'SampledBatch']
