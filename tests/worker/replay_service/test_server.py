"""The replay server and its client over real sockets on 127.0.0.1 (in-process server, real gRPC)."""

import time

import grpc
import pytest
import torch

from ding.config import ConfigError
from ding.interaction.replay.client import PrioritySender, ReplayClient
from ding.interaction.replay.prefetch import DEGRADED, OK
from ding.worker.replay_buffer import create_buffer
from ding.worker.replay_service import RemoteReplayBuffer, ReplayServer, check_replay_client_config

SECRET = 'replay-test-secret-0123456789'


def transitions(n, obs_dim=4):
    return [
        {'obs': torch.randn(obs_dim), 'action': torch.tensor(i % 2), 'reward': torch.tensor(1.0), 'done': False}
        for i in range(n)
    ]


@pytest.fixture
def server():
    buffer = create_buffer(dict(type='advanced', replay_buffer_size=500))
    srv = ReplayServer(buffer, SECRET, buffer_type='advanced', max_message_bytes=1 << 20).start()
    yield srv
    srv.stop(grace=None)


def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_insert_sample_and_priorities_reach_the_buffer(server):
    client = ReplayClient(server.address, SECRET)
    try:
        answer = client.insert(transitions(100), collector_envstep=100)
        assert (answer.count, answer.push_count) == (100, 100)
        status = client.status()
        assert status.buffer_type == 'advanced' and status.count == 100
        assert [(f.name, f.dtype) for f in status.encoding.fields][:2] == [('obs', 'float32'), ('action', 'int64')]
        response = client.sample_raw(16, learner_iter=3)
        assert response.ready and response.batch.size == 16 and len(response.is_weight) == 16
        assert (client.status().sample_count, client.status().push_count) == (16, 100)
        sender = PrioritySender(client)
        sender.send(
            {
                'replay_unique_id': list(response.replay_unique_id),
                'replay_buffer_idx': list(response.replay_buffer_idx),
                'priority': [50.0] * 16,
            }
        )
        assert wait_for(lambda: sender.sent == 1)
        sender.close()
        assert server.servicer.buffer._max_priority == 50.0
    finally:
        client.close()


def test_a_call_without_the_token_is_refused_before_anything_is_stored(server):
    intruder = ReplayClient(server.address, 'another-secret-0123456789')
    with pytest.raises(grpc.RpcError) as info:
        intruder.insert(transitions(10))
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert server.servicer.buffer.count() == 0 and server.servicer.encoding is None
    intruder.close()


def test_inserts_must_keep_the_first_inserts_encoding_and_the_size_bound(server):
    client = ReplayClient(server.address, SECRET)
    client.insert(transitions(4))
    with pytest.raises(grpc.RpcError) as info:
        client.insert(transitions(4, obs_dim=5))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert 'obs: float32[5] (expected obs: float32[4])' in info.value.details()
    with pytest.raises(grpc.RpcError) as info:  # about 4 MiB: over the server's 1 MiB bound
        client.insert([{'obs': torch.zeros(1 << 20), 'action': torch.tensor(0)}])
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert server.servicer.buffer.count() == 4
    client.close()


def test_the_learner_side_goes_degraded_in_an_outage_and_recovers_on_the_same_port():
    buffer = create_buffer(dict(type='naive', replay_buffer_size=200))
    server = ReplayServer(buffer, SECRET).start()
    port = server.port
    cfg = check_replay_client_config(dict(replay_address=server.address, replay_timeout=0.5, sample_wait=0.1))
    states = []
    remote = RemoteReplayBuffer(cfg, 8, SECRET, on_state=lambda before, after: states.append(after))
    try:
        remote.push(transitions(32))
        assert wait_for(lambda: remote.sample(8, 0) is not None)
        server.stop(grace=None)
        assert wait_for(lambda: remote.sample(8, 0) is None and remote.state == DEGRADED)  # the ready ones drain first
        server = ReplayServer(create_buffer(dict(type='naive', replay_buffer_size=200)), SECRET, port=port).start()
        remote.push(transitions(32))  # the collectors refill the restarted server
        assert wait_for(lambda: remote.sample(8, 1) is not None and remote.state == OK)
        assert DEGRADED in states and states[-1] == OK
    finally:
        remote.close()
        server.stop(grace=None)


@pytest.mark.parametrize(
    'section, message',
    [
        (dict(replay_address='localhost'), 'replay_address must be HOST:PORT'),
        (dict(replay_address='127.0.0.1:1', prefetch_depth=0), 'prefetch_depth = 0 is out of range'),
        (dict(replay_address='127.0.0.1:1', replay_timeout=-1), 'replay_timeout = -1 is out of range'),
        (dict(replay_address='127.0.0.1:1', save_with_checkpoint=True), 'the replay server keeps the data'),
    ],
)
def test_bad_replay_client_settings_name_their_key(section, message):
    with pytest.raises(ConfigError, match=message):
        check_replay_client_config(section)
    assert check_replay_client_config(dict(replay_buffer_size=10)) is None  # no address: the in-process buffer
