"""``ding learner`` fed by ``ding replay-server`` and ``ding replay-feed``: three real processes on 127.0.0.1."""

import pytest

from ding.config import ConfigError
from ding.config.parallel import find_free_port
from ding.entry.learner_service import apply_service_args, main
from tests.helpers.replay_processes import DingProcess, replay_server, stop_all, write_config


def test_the_command_line_fills_the_config():
    from easydict import EasyDict

    cfg = EasyDict(exp_name='x', policy=dict(other=dict(replay_buffer=dict(replay_buffer_size=10))))
    apply_service_args(cfg, '127.0.0.1:5000', '127.0.0.1:5001', 's3://bucket/runs', 'run7')
    assert cfg.policy.other.replay_buffer.replay_address == '127.0.0.1:5000'
    assert (cfg.service.enable, cfg.service.host, cfg.service.port) == (True, '127.0.0.1', 5001)
    assert cfg.policy.learn.learner.checkpoint.ckpt_uri == 's3://bucket/runs' and cfg.exp_name == 'run7'
    with pytest.raises(ConfigError, match='--weights must be HOST:PORT'):
        apply_service_args(cfg, '127.0.0.1:5000', 'localhost', None, None)


def test_an_invalid_config_fails_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_RUN_SECRET', 'replay-test-secret-0123456789')
    config = tmp_path / 'bad.py'
    config.write_text(
        'import copy\n'
        'from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config\n'
        'main_config = copy.deepcopy(main_config)\n'
        'main_config.policy.other.replay_buffer.prefetch_depth = 100\n'
    )
    assert main(['-c', str(config), '--replay', '127.0.0.1:1']) == 2
    assert 'replay_buffer.prefetch_depth = int 100 is out of range' in capsys.readouterr().err
    assert not (tmp_path / 'cartpole_dqn_seed0').exists()


@pytest.mark.slow
def test_dqn_trains_through_a_replay_outage(tmp_path):
    """Server, collector and learner; the server is SIGKILLed mid-run and restarted empty on the same port (the
    collector refills it): the learner goes degraded, pauses, resumes by itself and still solves."""
    config = write_config(tmp_path / 'cartpole_dqn_replay.py', stop_value=100)
    taken: set[int] = set()  # two different ports
    replay_port, weights_port = find_free_port(taken=taken), find_free_port(taken=taken)
    replay, weights = f'127.0.0.1:{replay_port}', f'127.0.0.1:{weights_port}'
    processes = []
    try:
        processes.append(replay_server(str(tmp_path), replay_port))
        learner = DingProcess(
            [
                'learner',
                '-c',
                config,
                '--replay',
                replay,
                '--weights',
                weights,
                '--run-id',
                'lrn',
                '--train-iter',
                '4000',
            ],
            str(tmp_path),
        )
        processes.append(learner)
        feed = DingProcess(['replay-feed', '-c', config, '--replay', replay, '--weights', weights], str(tmp_path))
        processes.append(feed)
        assert learner.wait_for('replay service: waiting -> ok', 60), learner.text()[-3000:]
        processes[0].kill()  # the outage
        assert learner.wait_for('replay service: ok -> degraded', 20), learner.text()[-3000:]
        processes[0] = replay_server(str(tmp_path), replay_port)
        assert learner.wait_for('replay service: degraded -> ', 30), learner.text()[-3000:]  # back: waiting or ok
        assert learner.wait_for('SOLVED', 90), learner.text()[-3000:]
        assert learner.proc.wait(timeout=30) == 0
        text = learner.text()
        assert text.index('ok -> degraded') < text.index('degraded -> ') < text.index('SOLVED')
        assert 'replay service: insert failed (1 in a row' in feed.text()  # the collector kept its batch, retried
        feed.proc.terminate()  # SIGTERM: the collector stops between collects, closes everything, exits 130
        assert feed.proc.wait(timeout=20) == 130, feed.text()[-2000:]
        changes = [line.split('replay service: ')[1].strip() for line in learner.lines if 'replay service: ' in line]
        assert changes[-1].endswith('-> ok')  # training again before it solved
    finally:
        stop_all(processes[::-1])


def test_a_learner_with_the_wrong_secret_stops_with_the_reason(tmp_path, capsys, monkeypatch):
    from ding.worker.replay_buffer import create_buffer
    from ding.worker.replay_service import ReplayServer

    monkeypatch.chdir(tmp_path)
    server = ReplayServer(create_buffer(dict(type='naive')), 'the-servers-secret-0123456789').start()
    monkeypatch.setenv('DING_RUN_SECRET', 'another-secret-0123456789abc')
    config = write_config(tmp_path / 'cfg.py', stop_value=195)
    try:
        assert main(['-c', config, '--replay', server.address, '--run-id', 'wrong_secret']) == 1
    finally:
        server.stop(grace=None)
    assert 'UNAUTHENTICATED: missing or wrong replay token' in capsys.readouterr().err
