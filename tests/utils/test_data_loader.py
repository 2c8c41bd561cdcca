"""AsyncDataLoader: background batches from a data source, in a thread or in worker processes."""

import gc
import multiprocessing as mp
import os
import signal
import threading
import time
from functools import partial

import pytest
import torch

from ding.utils.data_loader import AsyncDataLoader, DataLoaderError


def stack_collate(samples):
    return {k: torch.stack([s[k] for s in samples]) for k in samples[0]}


class CountingSource:
    """A tiny replay-buffer-like source: ``source(n)`` returns the next n transitions."""

    def __init__(self, obs_dim=4):
        self.obs_dim = obs_dim
        self.calls = 0
        self.next_id = 0

    def __call__(self, batch_size):
        self.calls += 1
        out = []
        for _ in range(batch_size):
            out.append({'obs': torch.full((self.obs_dim,), float(self.next_id)), 'id': torch.tensor(self.next_id)})
            self.next_id += 1
        return out


def read_sample(path):
    """What a comm learner's callables do: load one sample from a file the user wrote."""
    return torch.load(path, weights_only=True)


@pytest.fixture
def no_leaks():
    """Fail if a test leaves loader threads or child processes behind."""
    before = set(threading.enumerate())
    yield
    deadline = time.time() + 2.0
    while time.time() < deadline:
        extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not extra and not mp.active_children():
            break
        time.sleep(0.05)
    assert [t.name for t in threading.enumerate() if t not in before and t.is_alive()] == []
    assert mp.active_children() == []


def test_thread_mode_yields_collated_batches(no_leaks):
    source = CountingSource()
    with AsyncDataLoader(source, batch_size=8, device='cpu', collate_fn=stack_collate) as loader:
        batches = [next(loader) for _ in range(3)]
        for batch in loader:  # also usable in a for loop
            batches.append(batch)
            break
    assert [b['obs'].shape for b in batches] == [torch.Size([8, 4])] * 4
    ids = torch.cat([b['id'] for b in batches])
    assert ids.tolist() == list(range(32))  # in order, nothing lost or repeated
    assert loader.closed


def test_default_collate_is_identity_and_none_means_not_ready(no_leaks):
    calls = []

    def source(n):
        calls.append(n)
        return None if len(calls) < 3 else list(range(n))  # not ready for the first two calls

    with AsyncDataLoader(source, batch_size=3, device='cpu') as loader:
        assert next(loader) == [0, 1, 2]
    assert len(calls) >= 3


def test_workers_run_partial_callables_from_files(tmp_path, no_leaks):
    paths = []
    for i in range(12):
        p = str(tmp_path / f'sample_{i}.pt')
        torch.save({'obs': torch.full((3,), float(i)), 'id': torch.tensor(i)}, p)
        paths.append(p)
    cursor = [0]

    def source(n):
        out = [partial(read_sample, paths[(cursor[0] + j) % len(paths)]) for j in range(n)]
        cursor[0] += n
        return out

    with AsyncDataLoader(
        source, batch_size=4, device='cpu', chunk_size=2, collate_fn=stack_collate, num_workers=2
    ) as loader:
        assert len(loader.worker_pids) == 2
        batches = [next(loader) for _ in range(3)]
    assert torch.cat([b['id'] for b in batches]).tolist() == list(range(12))
    assert batches[1]['obs'][:, 0].tolist() == [4.0, 5.0, 6.0, 7.0]


def test_workers_run_lambdas_and_closures(no_leaks):
    scale = torch.tensor(10.0)
    parent_pid = os.getpid()
    counter = [0]

    def source(n):
        counter[0] += 1
        base = counter[0]
        # closures over local state: not picklable, run in forked processes
        return [lambda i=i: {'v': scale * base + i, 'pid': torch.tensor(os.getpid())} for i in range(n)]

    with AsyncDataLoader(source, batch_size=3, device='cpu', collate_fn=stack_collate, num_workers=2) as loader:
        first, second = next(loader), next(loader)
    assert first['v'].tolist() == [10.0, 11.0, 12.0]
    assert second['v'].tolist() == [20.0, 21.0, 22.0]
    assert parent_pid not in first['pid'].tolist()  # really ran in another process


def tagged_sample(batch_idx, delay):
    time.sleep(delay)
    return {'batch': torch.tensor(batch_idx), 'pid': torch.tensor(os.getpid())}


def test_one_job_per_batch_still_uses_every_worker_and_keeps_order(no_leaks):
    counter = [0]

    def source(n):
        counter[0] += 1
        delay = 0.2 if counter[0] % 2 else 0.0  # odd batches are slow: even ones finish first
        return [partial(tagged_sample, counter[0], delay) for _ in range(n)]

    # chunk_size == batch_size (the learner's default): each batch is a single job
    with AsyncDataLoader(
        source, batch_size=2, device='cpu', chunk_size=2, collate_fn=stack_collate, num_workers=2
    ) as loader:
        batches = [next(loader) for _ in range(4)]
    assert [b['batch'][0].item() for b in batches] == [1, 2, 3, 4]  # order kept
    assert len({b['pid'][0].item() for b in batches}) == 2  # both workers had work


def test_a_ready_made_batch_from_the_source_goes_to_collate_as_is(no_leaks):
    source = lambda n: {'obs': torch.zeros(n, 3)}  # noqa: E731 - already collated by the source
    with AsyncDataLoader(source, batch_size=5, device='cpu', num_workers=0) as loader:
        assert next(loader)['obs'].shape == (5, 3)


def _fails_in_worker():
    raise ValueError('corrupt sample file')


def test_worker_exception_is_reraised_with_original_traceback(no_leaks):
    loader = AsyncDataLoader(lambda n: [_fails_in_worker] * n, batch_size=2, device='cpu', num_workers=2)
    try:
        with pytest.raises(ValueError) as info:
            next(loader)
        text = str(info.value)
        assert 'corrupt sample file' in text and '_fails_in_worker' in text and 'worker' in text
        with pytest.raises(ValueError):  # the error sticks; it is not turned into "end of data"
            next(loader)
    finally:
        loader.close()


def test_data_source_and_collate_errors_reach_the_consumer(no_leaks):
    def broken_source(n):
        return {}['missing_key']

    with AsyncDataLoader(broken_source, batch_size=2, device='cpu') as loader:
        with pytest.raises(KeyError) as info:
            next(loader)
    assert 'broken_source' in str(info.value) and 'data_source' in str(info.value)

    def bad_collate(samples):
        return torch.stack(samples)  # ints, not tensors

    with AsyncDataLoader(lambda n: list(range(n)), batch_size=2, device='cpu', collate_fn=bad_collate) as loader:
        with pytest.raises(TypeError) as info:
            next(loader)
    assert 'collate_fn' in str(info.value) and 'bad_collate' in str(info.value)


def test_killed_worker_surfaces_as_error_not_hang(no_leaks):
    loader = AsyncDataLoader(lambda n: [partial(time.sleep, 0.02)] * n, batch_size=4, device='cpu', num_workers=2)
    try:
        next(loader)
        os.kill(loader.worker_pids[0], signal.SIGKILL)
        start = time.time()
        with pytest.raises(DataLoaderError, match='SIGKILL'):
            for _ in range(1000):  # a few already-prefetched batches may still arrive first
                next(loader)
        assert time.time() - start < 5.0
    finally:
        loader.close()


def test_prefetch_is_bounded(no_leaks):
    source = CountingSource()
    with AsyncDataLoader(source, batch_size=2, device='cpu', queue_maxsize=2) as loader:
        time.sleep(0.3)  # consumer idle: the producer must stop after filling the queue
        # 2 queued batches + 1 built and waiting for a free slot
        assert source.calls <= 3
        next(loader)
        time.sleep(0.2)
        assert source.calls <= 4


def test_refill_at_makes_the_producer_work_in_bursts(no_leaks):
    source = CountingSource()

    def calls_once_settled(expected):
        deadline = time.time() + 10
        while source.calls < expected and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # ... and no call more
        return source.calls

    with AsyncDataLoader(
        source, batch_size=2, device='cpu', collate_fn=stack_collate, queue_maxsize=4, refill_at=1
    ) as loader:
        assert calls_once_settled(4) == 4  # filled the queue, then waits
        ids = [int(next(loader)['id'][0]) for _ in range(2)]
        assert calls_once_settled(4) == 4  # 2 batches left > refill_at: still waiting
        ids.append(int(next(loader)['id'][0]))
        assert calls_once_settled(7) == 7  # 1 left: refilled to 4 in one go
        ids += [int(next(loader)['id'][0]) for _ in range(4)]
        assert ids == list(range(0, 14, 2))  # in order, nothing lost or repeated


def test_refill_at_must_be_below_queue_maxsize():
    with pytest.raises(ValueError, match='refill_at'):
        AsyncDataLoader(CountingSource(), batch_size=2, device='cpu', queue_maxsize=4, refill_at=4)
    with pytest.raises(ValueError, match='refill_at'):
        AsyncDataLoader(CountingSource(), batch_size=2, device='cpu', queue_maxsize=4, refill_at=-1)


def test_close_is_idempotent_and_stops_everything(no_leaks):
    loader = AsyncDataLoader(lambda n: [partial(int, 1)] * n, batch_size=2, device='cpu', num_workers=2)
    assert next(loader) == [1, 1]
    children = mp.active_children()
    assert len(children) == 2
    loader.close()
    loader.close()
    assert not any(p.is_alive() for p in children)
    assert loader.worker_pids == []
    with pytest.raises(StopIteration):
        next(loader)


def test_dropping_the_loader_shuts_it_down(no_leaks):
    loader = AsyncDataLoader(CountingSource(), batch_size=2, device='cpu')
    next(loader)
    producer = [t for t in threading.enumerate() if t.name == 'ding-data-loader-producer']
    assert len(producer) == 1
    del loader
    gc.collect()
    producer[0].join(timeout=2.0)
    assert not producer[0].is_alive()


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match='batch_size'):
        AsyncDataLoader(CountingSource(), batch_size=0, device='cpu')
    with pytest.raises(TypeError, match='data_source'):
        AsyncDataLoader([1, 2], batch_size=2, device='cpu')


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
def test_batches_are_moved_to_cuda(no_leaks):
    with AsyncDataLoader(CountingSource(), batch_size=4, device='cuda', collate_fn=stack_collate) as loader:
        batch = next(loader)
    assert batch['obs'].is_cuda and batch['id'].is_cuda
