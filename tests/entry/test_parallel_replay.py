"""``ding -m parallel`` with ``replay_address``: the collectors insert into a ``ding replay-server`` process and the
learner trains on batches sampled from it (docs/replay.md, "With the parallel pipeline")."""

import copy
import os
import subprocess
import sys

import pytest
from easydict import EasyDict

from ding.config import ConfigError
from ding.config.parallel import find_free_port
from ding.entry.parallel_entry import parallel_pipeline
from ding.interaction.replay.client import ReplayClient
from ding.worker.replay_service import check_parallel_replay
from tests.helpers.parallel_run import CONFIG
from tests.helpers.processes import child_env
from tests.helpers.replay_processes import SECRET, replay_server, stop_all


def main_config(**replay_buffer):
    learner = dict(learner_num=1)
    return EasyDict(
        exp_name='x',
        policy=dict(
            learn=dict(learner=learner),
            other=dict(replay_buffer=dict(replay_buffer_size=1000, **replay_buffer)),
        ),
    )


def test_a_parallel_config_without_replay_address_keeps_the_sample_files():
    assert check_parallel_replay(main_config()) is None


def test_the_replay_settings_of_a_parallel_config_are_checked():
    cfg = check_parallel_replay(main_config(replay_address='127.0.0.1:50051', prefetch_depth=2))
    assert (cfg.replay_address, cfg.prefetch_depth) == ('127.0.0.1:50051', 2)
    with pytest.raises(ConfigError, match='replay_address'):
        check_parallel_replay(main_config(replay_address='localhost'))


def test_keys_that_cannot_apply_with_a_replay_server_are_named():
    cfg = main_config(replay_address='127.0.0.1:50051')
    cfg.policy.learn.learner.update(
        learner_num=2, max_staleness=50, multi_learner=dict(mode='data_parallel', assignment='bins')
    )
    with pytest.raises(ConfigError) as err:
        check_parallel_replay(cfg)
    message = str(err.value)
    assert "multi_learner.assignment='bins'" in message and 'policy.learn.learner.max_staleness' in message


def test_the_pipeline_needs_the_replay_servers_secret_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv('DING_RUN_SECRET', raising=False)
    namespace: dict = {}
    exec(open(CONFIG).read(), namespace)
    main = copy.deepcopy(namespace['main_config'])
    main.policy.other.replay_buffer.replay_address = '127.0.0.1:1'
    with pytest.raises(ConfigError, match=r'needs the run secret of the replay server: set \$DING_RUN_SECRET'):
        parallel_pipeline((main, namespace['create_config'], namespace['system_config']), seed=0)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_collectors_insert_into_the_replay_server_and_the_learner_samples_from_it(tmp_path):
    """A prioritised DQN: ``ding replay-server`` and ``ding -m parallel`` (a coordinator, a learner and two
    collector processes), all on 127.0.0.1."""
    port = find_free_port()
    config = tmp_path / 'cartpole_dqn_parallel_replay.py'
    config.write_text(
        f'exec(open({CONFIG!r}).read())\n'
        "main_config.exp_name = 'par_replay'\n"
        'main_config.env.stop_value = 100\n'
        'main_config.policy.update(priority=True, priority_IS_weight=True)\n'
        f"main_config.policy.other.replay_buffer.update(replay_address='127.0.0.1:{port}', priority=True)\n"
    )
    server = replay_server(str(tmp_path), port, '--config', str(config), '--buffer-type', 'advanced')
    pipeline = None
    try:
        with open(tmp_path / 'pipeline.log', 'wb') as log:
            pipeline = subprocess.Popen(
                [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', str(config), '-s', '0'],
                cwd=tmp_path,
                env=child_env(OMP_NUM_THREADS='1', DING_RUN_SECRET=SECRET, DING_PROGRESS='0'),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            code = pipeline.wait(timeout=120)
        output = (tmp_path / 'pipeline.log').read_text(errors='replace')
        assert code == 0 and 'par_replay: SOLVED' in output, output[-3000:]
        client = ReplayClient(f'127.0.0.1:{port}', SECRET, timeout=10.0)
        try:
            status = client.status()
            weights = client.sample_raw(64, learner_iter=0).is_weight
        finally:
            client.close()
        assert status.push_count >= 512 and status.count > 0  # inserted by the collectors
        assert status.sample_count > 0  # drawn by the learner
        assert len(set(weights)) > 1  # the learner's TD-error priorities reached the server (uniform: all 1.0)
        logs = tmp_path / 'par_replay' / 'log'
        learner_log = (logs / 'comm_learner0' / 'comm_learner0_logger.txt').read_text()
        assert f'batches from the replay service at 127.0.0.1:{port}' in learner_log
        collector_log = (logs / 'comm_collector0' / 'comm_collector0_logger.txt').read_text()
        assert f'samples to the replay service at 127.0.0.1:{port}' in collector_log
        data_dir = tmp_path / 'par_replay' / 'data'
        assert not data_dir.exists() or os.listdir(data_dir) == []  # no sample file was written
    finally:
        if pipeline is not None and pipeline.poll() is None:
            pipeline.terminate()  # the pipeline stops its workers
            try:
                pipeline.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pipeline.kill()  # its workers die with it (ding.entry.lifeline)
                pipeline.wait()
        stop_all([server])
