"""The learner's prefetcher against a real replay server on 127.0.0.1."""

import time

import pytest
import torch

from ding.interaction.replay.client import ReplayClient
from ding.interaction.replay.prefetch import OK, BatchPrefetcher
from ding.worker.replay_buffer import create_buffer
from ding.worker.replay_service import ReplayServer

SECRET = 'prefetch-test-secret-0123456789'


def transitions(n):
    return [{'obs': torch.randn(4), 'action': torch.tensor(i % 2), 'reward': torch.tensor(1.0)} for i in range(n)]


def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def server():
    srv = ReplayServer(create_buffer(dict(type='naive', replay_buffer_size=500)), SECRET).start()
    yield srv
    srv.stop(grace=None)


def test_the_prefetcher_keeps_prefetch_depth_batches_ready_and_then_stops_calling(server):
    client = ReplayClient(server.address, SECRET)
    client.insert(transitions(64))
    calls = []
    prefetcher = BatchPrefetcher(client, 8, prefetch_depth=2, observe=lambda status, s: calls.append(status)).start()
    try:
        assert prefetcher.batches_per_call == 2
        assert wait_for(lambda: prefetcher.qsize() == 4)  # 2 ready and one call's 2 that came besides
        time.sleep(0.3)  # a full queue stops the calls until the learner takes batches
        assert prefetcher.qsize() == 4 and calls.count('ok') == 2
        batch = prefetcher.get(timeout=1)
        assert batch.size == 8 and batch.data['obs'].shape == (8, 4) and batch.data['IS'].shape == (8,)
        assert len(batch.data['replay_unique_id']) == 8 and batch.data['action'].dtype == torch.int64
        assert prefetcher.state == OK
        time.sleep(0.3)
        assert calls.count('ok') == 2  # one batch taken: not enough room for a call of two
        prefetcher.get(timeout=1)
        assert wait_for(lambda: calls.count('ok') == 3 and prefetcher.qsize() == 4)
    finally:
        prefetcher.close()
        client.close()


def test_a_buffer_smaller_than_prefetch_depth_batches_still_serves_single_batches(server):
    client = ReplayClient(server.address, SECRET)
    client.insert(transitions(20))  # room for two batches of 8, not for the four a call asks for
    prefetcher = BatchPrefetcher(client, 8, prefetch_depth=4).start()
    try:
        batches = [prefetcher.get(timeout=5) for _ in range(6)]
        assert all(b is not None and b.size == 8 for b in batches)
    finally:
        prefetcher.close()
        client.close()
