"""The serial pipeline with ``policy.other.replay_buffer.replay_address``: its buffer is a replay server."""

import copy
import subprocess
import sys

import pytest

from ding.entry import serial_pipeline
from ding.worker.replay_buffer import create_buffer
from ding.worker.replay_service import ReplayServer
from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config
from tests.helpers.processes import child_env

SECRET = 'serial-replay-secret-0123456789'


@pytest.mark.slow
def test_serial_dqn_pushes_to_and_samples_from_a_replay_server(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_RUN_SECRET', SECRET)
    buffer = create_buffer(dict(type='advanced', replay_buffer_size=5000))
    server = ReplayServer(buffer, SECRET).start()
    cfg = copy.deepcopy(main_config)
    cfg.exp_name = 'serial_replay'
    cfg.policy.priority = True
    cfg.policy.other.replay_buffer.replay_address = server.address
    try:
        policy = serial_pipeline((cfg, copy.deepcopy(create_config)), seed=0, max_train_iter=60)
    finally:
        server.stop(grace=None)
    assert policy is not None
    assert buffer.push_count >= 64  # every collected sample went through Insert
    assert buffer._max_priority != 1.0  # the TD errors came back through UpdatePriorities
    assert (tmp_path / 'serial_replay' / 'ckpt').is_dir()


def test_the_serial_path_loads_neither_grpc_nor_the_http_layer():
    code = (
        'import sys, ding.entry.pipeline_parts, ding.worker.replay_service; '
        "print(sorted(m for m in ('grpc', 'flask', 'ding.interaction') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, '-c', code], env=child_env(), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == '[]'
