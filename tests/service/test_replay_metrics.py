"""A learner's replay client on its run service: metrics and run-control events."""

import time

import torch

from ding.service import SERVICE_DEFAULTS
from ding.service.replay_metrics import watch_replay
from ding.service.runtime import ServiceRuntime
from ding.worker.replay_buffer import create_buffer
from ding.worker.replay_service import RemoteReplayBuffer, ReplayServer, check_replay_client_config

SECRET = 'replay-metrics-secret-0123456789'


def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_sample_calls_queue_and_state_reach_metrics_and_events(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    server = ReplayServer(create_buffer(dict(type='naive', replay_buffer_size=100)), SECRET).start()
    runtime = ServiceRuntime(dict(SERVICE_DEFAULTS, enable=True), 'replay_metrics')
    cfg = check_replay_client_config(dict(replay_address=server.address, replay_timeout=0.5))
    remote = RemoteReplayBuffer(cfg, 4, SECRET)
    watch_replay(runtime, remote)
    try:
        remote.push([{'obs': torch.zeros(3), 'action': torch.tensor(0)} for _ in range(20)])
        assert wait_for(lambda: remote.sample(4, 0) is not None)
        server.stop(grace=None)
        assert wait_for(lambda: remote.sample(4, 0) is None and remote.state == 'degraded')
        text = runtime.metrics.text().decode()
        assert 'learner_samples_total{status="ok"}' in text and 'learner_samples_total{status="error"}' in text
        assert 'learner_replay_state{learner_replay_state="degraded"} 1.0' in text
        assert 'learner_sample_latency_seconds_count' in text and 'prefetch_queue_size 0.0' in text
        events = [e for e in runtime.control.status()['events'] if e['event'] == 'replay_state']
        assert [e['after'] for e in events][-1] == 'degraded' and events[-1]['address'] == server.address
    finally:
        remote.close()
        runtime.close()
        server.stop(grace=None)
