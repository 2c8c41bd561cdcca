"""The machinery behind ``AsyncDataLoader`` (``ding.utils.data_loader``): the producer thread, the worker
processes, the shared state and the shutdown. See that module's docstring for the design."""

from __future__ import annotations

import collections
import itertools
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

# How often blocked waits wake up to look at the stop flag and at process health (seconds).
POLL_S = 0.1
# A worker that has not exited this long after the stop sentinel is terminated.
JOIN_GRACE_S = 2.0


class DataLoaderError(RuntimeError):
    """A background part of the loader failed in a way that has no exception of its own (e.g. a dead worker)."""


class Failure:
    """An exception captured in the producer thread or a worker, carried to the consumer as text."""

    def __init__(self, where: str, exc: BaseException) -> None:
        self.where = where
        self.exc_type: type | None = type(exc)
        try:
            # The failure crosses a process boundary; a class that does not pickle (e.g. defined inside
            # a function) would make the queue drop the whole message, so fall back to DataLoaderError.
            pickle.dumps(self.exc_type)
        except Exception:
            self.exc_type = None
        self.exc_name = type(exc).__name__
        self.tb_text = ''.join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def make_exception(self) -> BaseException:
        msg = f'Caught {self.exc_name} in {self.where}.\nOriginal traceback:\n{self.tb_text}'
        if self.exc_type is None:
            return DataLoaderError(msg)
        try:
            # Same type as the original so callers can still catch it by type.
            return self.exc_type(msg)
        except Exception:
            return DataLoaderError(msg)


def _to_device(data: Any, device: str) -> Any:
    """Recursively move tensors inside dicts / lists / tuples to ``device``."""
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, dict):
        moved = {k: _to_device(v, device) for k, v in data.items()}
        return moved if type(data) is dict else type(data)(moved)
    if isinstance(data, tuple) and hasattr(data, '_fields'):  # namedtuple
        return type(data)(*(_to_device(v, device) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_to_device(v, device) for v in data)
    return data


def _child_setup() -> None:
    """First thing every worker process does."""
    torch.set_num_threads(1)
    # Ctrl-C goes to the whole process group; the parent shuts workers down itself, so workers
    # ignore SIGINT instead of each printing a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_chunk(job_id: int, chunk: Sequence[Callable[[], Any]], worker_name: str) -> tuple:
    """Run one job; return a message for the result queue whose payload is already pickled."""
    try:
        samples = [fn() for fn in chunk]
        # Pickle here rather than in the queue's feeder thread: there an unpicklable result would be
        # dropped with only a printed warning, and the consumer would wait for it forever. Plain pickle
        # (tensor bytes copied) rather than torch's shared-memory reductions: those hand over file
        # descriptors that vanish when a one-shot process exits before the parent reads its result.
        return job_id, True, pickle.dumps(samples, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as e:  # noqa: B902 - everything goes back to the consumer
        return job_id, False, Failure(f'data loader {worker_name}', e)


def worker_loop(job_queue: Any, result_queue: Any, worker_id: int, parent_pid: int) -> None:
    """Long-lived worker: run pickled jobs until the ``None`` sentinel or until the parent is gone."""
    _child_setup()
    # At shutdown the parent stops reading; do not block process exit on flushing unread results.
    result_queue.cancel_join_thread()
    name = f'worker {worker_id} (pid {os.getpid()})'
    while True:
        try:
            msg = job_queue.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent_pid:  # orphaned: the parent died without closing us
                return
            continue
        if msg is None:
            return
        job_id, payload = msg
        try:
            chunk = pickle.loads(payload)
        except BaseException as e:  # noqa: B902
            result_queue.put((job_id, False, Failure(f'data loader {name} while unpickling a job', e)))
            continue
        result_queue.put(_run_chunk(job_id, chunk, name))


def _oneshot_job(job_id: int, chunk: Sequence[Callable[[], Any]], result_queue: Any) -> None:
    """Run one unpicklable job in a freshly forked process (the chunk is inherited, not pickled)."""
    _child_setup()
    result_queue.put(_run_chunk(job_id, chunk, f'one-shot job process (pid {os.getpid()})'))
    # Here we DO want the result flushed before exiting, so no cancel_join_thread().


def _describe_exit(proc: Any) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f'killed by signal {signal.Signals(-code).name}'
        except ValueError:
            return f'killed by signal {-code}'
    return f'exit code {code}'


class LoaderState:
    """Everything the producer thread and the shutdown code share.

    Kept apart from the loader object so the thread holds no reference to the loader, which can then
    be garbage-collected (and its finalizer shut everything down) when the user drops it.
    """

    def __init__(self, maxsize: int, refill_at: int | None = None) -> None:
        self.out_queue: queue.Queue = queue.Queue(maxsize=maxsize)
        # Once the queue is full the producer waits until at most refill_at batches are left (see
        # AsyncDataLoader); ``refill`` is set by the consumer when that happens.
        self.refill_at = maxsize - 1 if refill_at is None else refill_at
        self.refill = threading.Event()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.ctx: Any = None
        self.job_queue: Any = None
        self.result_queue: Any = None
        self.workers: list[Any] = []
        self.oneshots: dict[int, Any] = {}
        self.lock = threading.Lock()  # guards ``oneshots`` between the producer and shutdown

    def dead_process_error(self) -> DataLoaderError | None:
        """An error for the first child that died while we still needed it, else None."""
        if self.stop.is_set():
            return None
        for i, w in enumerate(self.workers):
            if w.exitcode is not None:
                return DataLoaderError(f'data loader worker {i} (pid {w.pid}) died unexpectedly ({_describe_exit(w)})')
        with self.lock:
            procs = list(self.oneshots.values())
        for p in procs:
            # A one-shot process exits by itself after putting its result; only a signal death or
            # a non-zero exit code (the result was never sent) is a failure.
            if p.exitcode is not None and p.exitcode != 0:
                return DataLoaderError(
                    f'data loader one-shot job process (pid {p.pid}) died unexpectedly ({_describe_exit(p)})'
                )
        return None


def shutdown_loader(state: LoaderState) -> None:
    """Stop the producer thread and every child process (safe to call more than once)."""
    state.stop.set()
    thread = state.thread
    if thread is not None and thread is not threading.current_thread():
        # The producer polls ``stop`` every POLL_S; a data source stuck in its own call is the only
        # thing that can outlast this join (the thread is a daemon, so it cannot block exit).
        thread.join(timeout=10.0)
    # A worker killed while waiting for a job may hold the job queue's read lock, so the others would
    # never see their sentinel: after any abnormal death skip the grace period and terminate at once.
    crashed = any(w.exitcode not in (None, 0) for w in state.workers)
    if state.job_queue is not None and not crashed:
        for w in state.workers:
            if w.is_alive():
                try:
                    state.job_queue.put(None)
                except (ValueError, OSError):
                    break
    deadline = time.monotonic() + (0.0 if crashed else JOIN_GRACE_S)
    with state.lock:
        procs = list(state.workers) + list(state.oneshots.values())
        state.oneshots.clear()
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(timeout=1.0)
        if p.is_alive():
            p.kill()
            p.join(timeout=1.0)
    for q in (state.job_queue, state.result_queue):
        if q is not None:
            # Children are gone, so nobody will read what is left in the pipe: do not flush it on exit.
            q.cancel_join_thread()
            q.close()
            feeder = getattr(q, '_thread', None)  # the queue's feeder thread exits right after close()
            if feeder is not None:
                feeder.join(timeout=1.0)
    state.workers = []
    state.job_queue = state.result_queue = None


def _wait_for_room(state: LoaderState) -> bool:
    """Producer: once the output queue is full, wait until the consumer has taken it down to
    ``refill_at`` batches. False if stopped first."""
    q = state.out_queue
    if state.refill_at >= q.maxsize - 1 or not q.full():
        return True
    state.refill.clear()
    while q.qsize() > state.refill_at:  # checked after the clear: a set() from here on is seen
        if state.stop.is_set():
            return False
        state.refill.wait(POLL_S)
    return True


def _put(state: LoaderState, item: Any) -> bool:
    """Put into the bounded output queue, waking up to honour ``stop``. False if stopped first."""
    while not state.stop.is_set():
        try:
            state.out_queue.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            continue
    return False


class _WorkerFailed(Exception):
    """Internal: carries a worker's Failure out to the producer loop's handler."""

    def __init__(self, failure: Any) -> None:
        super().__init__(failure.where)
        self.failure = failure


class _Batch:
    """One batch on its way: samples per chunk, and the worker jobs still running for it."""

    def __init__(self, n_chunks: int = 0, ready: Any = None) -> None:
        self.ready = ready  # the samples as they are, when no worker jobs are involved
        self.chunks: list[Any] = [None] * n_chunks
        self.pending: dict[int, int] = {}  # job id -> chunk index

    def samples(self) -> Any:
        if not self.chunks:
            return self.ready
        return [s for chunk in self.chunks for s in chunk]


def produce_loop(
    state: LoaderState,
    data_source: Callable,
    batch_size: int,
    collate_fn: Callable,
    device: str | None,
    chunk_size: int,
) -> None:
    """Ask for data, have it run (in workers when it is callables), collate, move, hand to the consumer."""
    where = 'data loader producer thread'
    # With workers, keep enough batches in flight that every worker has a job (a batch of one chunk
    # would otherwise leave the others idle); the output queue bounds what waits beyond that.
    jobs_per_batch = -(-batch_size // chunk_size)
    max_inflight = max(1, -(-len(state.workers) // jobs_per_batch)) if state.workers else 1
    inflight: collections.deque[_Batch] = collections.deque()
    owner: dict[int, _Batch] = {}  # job id -> its batch
    job_ids = itertools.count()
    try:
        while not state.stop.is_set():
            if not _wait_for_room(state):
                return
            while len(inflight) < max_inflight:
                where = 'data_source'
                items = data_source(batch_size)
                if items is None:  # "no data yet"
                    if inflight:
                        break
                    state.stop.wait(0.01)
                    if state.stop.is_set():
                        return
                    continue
                where = 'data loader producer thread'
                inflight.append(_start_batch(state, items, chunk_size, job_ids, owner))
            batch_rec = inflight[0]
            where = 'data loader worker jobs'
            if not _wait_for(state, batch_rec, owner):
                return  # stopped
            inflight.popleft()
            where = 'collate_fn'
            batch = collate_fn(batch_rec.samples())
            if device is not None:
                where = f'moving the batch to {device}'
                batch = _to_device(batch, device)
            if not _put(state, batch):
                return
    except _WorkerFailed as e:
        _put(state, e.failure)
    except BaseException as e:  # noqa: B902 - the consumer must see every failure
        _put(state, Failure(where, e))


def _start_batch(
    state: LoaderState, items: Any, chunk_size: int, job_ids: Iterator[int], owner: dict[int, _Batch]
) -> _Batch:
    """Turn what data_source returned into a batch record, submitting worker jobs for callables."""
    if not isinstance(items, (list, tuple)):
        return _Batch(ready=items)  # already one collection (e.g. a dict): collate_fn gets it as it is
    if not (items and all(callable(x) for x in items)):
        return _Batch(ready=items)
    if not state.workers:
        return _Batch(ready=[fn() for fn in items])  # thread mode: run the callables here
    # Check every batch, not only while waiting: a dead worker must be reported even when the
    # surviving ones keep up with the demand.
    err = state.dead_process_error()
    if err is not None:
        raise err
    chunks = [items[i : i + chunk_size] for i in range(0, len(items), chunk_size)]
    rec = _Batch(len(chunks))
    for idx, chunk in enumerate(chunks):
        job_id = next(job_ids)
        rec.pending[job_id] = idx
        owner[job_id] = rec
        try:
            payload = pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            if state.ctx.get_start_method() != 'fork':
                raise TypeError(
                    f'data_source returned callables that cannot be pickled ({e}); with the '
                    f"'{state.ctx.get_start_method()}' start method worker jobs must pickle"
                ) from e
            # Lambdas / closures: a process forked for this job inherits them, no pickling needed.
            proc = state.ctx.Process(
                target=_oneshot_job,
                args=(job_id, chunk, state.result_queue),
                name=f'ding-data-loader-job-{job_id}',
                daemon=True,
            )
            with state.lock:
                if state.stop.is_set():
                    return rec
                proc.start()
                state.oneshots[job_id] = proc
        else:
            state.job_queue.put((job_id, payload))
    return rec


def _wait_for(state: LoaderState, rec: _Batch, owner: dict[int, _Batch]) -> bool:
    """Collect worker results until ``rec`` is complete (storing others' on the way). False if stopped."""
    while rec.pending:
        try:
            job_id, ok, payload = state.result_queue.get(timeout=POLL_S)
        except queue.Empty:
            if state.stop.is_set():
                return False
            err = state.dead_process_error()
            if err is not None:
                raise err from None
            continue
        with state.lock:
            proc = state.oneshots.pop(job_id, None)
        if proc is not None:
            proc.join(timeout=1.0)
        if not ok:
            raise _WorkerFailed(payload)
        target = owner.pop(job_id)
        target.chunks[target.pending.pop(job_id)] = pickle.loads(payload)
    return True


__all__ = ['DataLoaderError', 'Failure', 'LoaderState', 'POLL_S', 'produce_loop', 'shutdown_loader', 'worker_loop']
