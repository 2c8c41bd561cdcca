"""``ding replay-server``'s checks before it listens."""

from ding.entry.cli import main as ding_main
from ding.worker.replay_service.server_main import buffer_config, build_parser


def test_the_server_needs_the_run_secret(monkeypatch, capsys):
    monkeypatch.delenv('DING_RUN_SECRET', raising=False)
    assert ding_main(['replay-server', '--port', '0']) == 2
    assert 'the replay service needs the run secret: set $DING_RUN_SECRET' in capsys.readouterr().err


def test_a_short_secret_or_an_unknown_buffer_type_is_refused(monkeypatch, capsys):
    monkeypatch.setenv('DING_RUN_SECRET', 'short')
    assert ding_main(['replay-server']) == 2
    assert 'at least 16 printable characters' in capsys.readouterr().err
    monkeypatch.setenv('DING_RUN_SECRET', 'replay-test-secret-0123456789')
    assert ding_main(['replay-server', '--buffer-type', 'nope']) == 2
    assert "replay buffer type 'nope' is not one of" in capsys.readouterr().err


def test_the_buffer_comes_from_the_config_without_the_client_keys(tmp_path):
    config = tmp_path / 'cfg.py'
    config.write_text(
        "main_config = dict(exp_name='x', env=dict(), policy=dict(other=dict(replay_buffer=dict(\n"
        "    type='advanced', replay_buffer_size=300, alpha=0.7, replay_address='127.0.0.1:1', prefetch_depth=2))))\n"
        "create_config = dict(env=dict(type='cartpole'), policy=dict(type='dqn'))\n"
    )
    cfg = buffer_config(build_parser().parse_args(['--config', str(config), '--size', '500']))
    assert cfg == {'type': 'advanced', 'replay_buffer_size': 500, 'alpha': 0.7}
