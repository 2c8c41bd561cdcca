"""``AsyncDataLoader``: an iterator that prefetches training batches in the background.

Two modes:

* ``num_workers == 0``: one producer thread calls ``data_source(batch_size)``, collates the samples and
  (for a ``cuda`` device) moves them to the device, while the consumer trains on the previous batch.
* ``num_workers > 0``: ``data_source`` returns zero-argument callables (e.g. ``partial(read_file, path)``);
  the producer thread splits them into jobs of ``chunk_size`` callables that worker processes run.

Why the ``fork`` start method for workers (on Linux): callables handed out by a data source are often
lambdas or closures, which the standard pickler cannot send to a ``spawn``/``forkserver`` child. Jobs
that pickle go to long-lived forked workers through a queue; a job that does not pickle runs in a
one-shot process forked for it, which inherits the callables without pickling. Every forked child
sets ``torch.set_num_threads(1)`` first: the parent's intra-op thread pool does not survive ``fork``,
and a child that tries to use it can deadlock. Children never touch CUDA (only the parent moves
batches to the device). Where ``fork`` is unavailable, ``spawn`` is used and callables must pickle.

Failures are never swallowed: an exception in ``data_source``, ``collate_fn`` or a worker is raised by
the consumer's next ``next()`` call, with the original traceback text in the message; a worker that
dies (e.g. killed by a signal) is reported within about a second.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .data_loader_workers import (
    POLL_S,
    DataLoaderError,
    Failure,
    LoaderState,
    produce_loop,
    shutdown_loader,
    worker_loop,
)


def _identity(x: Any) -> Any:
    return x


class AsyncDataLoader:
    """Iterator over batches prepared in the background.

    Arguments:
        - data_source: ``data_source(batch_size) -> list``: samples, or zero-argument callables each returning
          one sample (run in worker processes when ``num_workers > 0``, in the producer thread otherwise).
          Returning ``None`` means "no data yet": the loader asks again shortly after.
        - batch_size: passed to ``data_source``.
        - device: where batches end up; tensors are moved only for ``cuda`` devices.
        - chunk_size: callables per worker job (default: spread one batch evenly over the workers). When a
          batch has fewer jobs than there are workers, several batches are prepared at once (in order).
        - collate_fn: turns the list of samples into the batch (default: the list itself).
        - num_workers: worker processes for callables (0: none).
        - queue_maxsize: batches prefetched ahead of the consumer (bounds memory).
        - refill_at: once ``queue_maxsize`` batches wait, the producer prepares more only when at most this
          many are left (default ``queue_maxsize - 1``: as soon as one is taken). A lower value makes the
          producer work in bursts: each time it wakes up also costs the consumer's thread (a hand-over of
          the GIL), which matters when a batch takes less time to prepare than to train on.

    Use ``close()`` (or ``with AsyncDataLoader(...) as loader:``) to stop everything it started.
    """

    def __init__(
        self,
        data_source: Callable[[int], list[Any] | None],
        batch_size: int,
        device: Any,
        chunk_size: int | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        queue_maxsize: int = 2,
        refill_at: int | None = None,
    ) -> None:
        if not callable(data_source):
            raise TypeError(f'AsyncDataLoader: data_source must be callable, got {type(data_source).__name__}')
        if int(batch_size) < 1:
            raise ValueError(f'AsyncDataLoader: batch_size must be >= 1, got {batch_size}')
        if int(num_workers) < 0:
            raise ValueError(f'AsyncDataLoader: num_workers must be >= 0, got {num_workers}')
        if chunk_size is not None and int(chunk_size) < 1:
            raise ValueError(f'AsyncDataLoader: chunk_size must be >= 1, got {chunk_size}')
        if int(queue_maxsize) < 1:
            raise ValueError(f'AsyncDataLoader: queue_maxsize must be >= 1, got {queue_maxsize}')
        if refill_at is not None and not 0 <= int(refill_at) < int(queue_maxsize):
            raise ValueError(
                f'AsyncDataLoader: refill_at must be in [0, queue_maxsize={queue_maxsize}), got {refill_at}'
            )
        self.data_source = data_source
        self.batch_size = int(batch_size)
        self.device = str(device)
        self.num_workers = int(num_workers)
        if chunk_size is None:
            chunk_size = -(-self.batch_size // max(1, self.num_workers))
        self.chunk_size = int(chunk_size)
        self.collate_fn = collate_fn if collate_fn is not None else _identity
        self._failure: BaseException | None = None
        self._closed = False

        state = LoaderState(int(queue_maxsize), None if refill_at is None else int(refill_at))
        self._state = state
        # Runs on close(), on garbage collection of the loader, or at interpreter exit, once.
        self._finalizer = weakref.finalize(self, shutdown_loader, state)
        if self.num_workers > 0:
            methods = mp.get_all_start_methods()
            state.ctx = mp.get_context('fork' if 'fork' in methods else 'spawn')
            state.job_queue = state.ctx.Queue()
            state.result_queue = state.ctx.Queue()
            for i in range(self.num_workers):
                w = state.ctx.Process(
                    target=worker_loop,
                    args=(state.job_queue, state.result_queue, i, os.getpid()),
                    name=f'ding-data-loader-worker-{i}',
                    daemon=True,
                )
                w.start()
                state.workers.append(w)
        device = self.device if self.device.startswith('cuda') else None
        state.thread = threading.Thread(
            target=produce_loop,
            args=(state, self.data_source, self.batch_size, self.collate_fn, device, self.chunk_size),
            name='ding-data-loader-producer',
            daemon=True,
        )
        state.thread.start()

    # ---- consumer side -----------------------------------------------------------------------
    def __iter__(self) -> AsyncDataLoader:
        return self

    def __next__(self) -> Any:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise StopIteration
        state = self._state
        err: BaseException | None = None
        while err is None:
            try:
                item = state.out_queue.get(timeout=POLL_S)
            except queue.Empty:
                err = state.dead_process_error()
                if (
                    err is None
                    and not (state.thread is not None and state.thread.is_alive())
                    and state.out_queue.empty()
                ):
                    err = DataLoaderError('data loader producer thread exited without a batch or an error')
                continue
            if not isinstance(item, Failure):
                if not state.refill.is_set() and state.out_queue.qsize() <= state.refill_at:
                    state.refill.set()
                return item
            err = item.make_exception()
        self._fail(err)

    def _fail(self, err: BaseException) -> None:
        # Keep the error: every later next() raises it again rather than pretending the data ended.
        self._failure = err
        self.close()
        raise err

    # ---- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the producer thread and all worker processes. Idempotent."""
        self._closed = True
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def queue_size(self) -> int:
        """Batches prepared and waiting for the consumer (the prefetch queue's length now)."""
        return self._state.out_queue.qsize()

    @property
    def worker_pids(self) -> list[int]:
        """Pids of the long-lived worker processes (empty in thread mode or after close)."""
        return [w.pid for w in self._state.workers]

    def __enter__(self) -> AsyncDataLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # The weakref finalizer also covers this; __del__ just makes the intent explicit and is harmless twice.
        try:
            self.close()
        except Exception:
            pass


__all__ = ['AsyncDataLoader', 'DataLoaderError']
