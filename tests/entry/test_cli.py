"""The ``ding`` command as a user runs it: a real subprocess, real files."""

import os
import subprocess
import sys
import time

import pytest

from tests.helpers.processes import ROOT, child_env

DQN_CONFIG = os.path.join(ROOT, 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py')


def run_ding(args, cwd, timeout=240):
    env = child_env(DING_PROGRESS='0', OMP_NUM_THREADS='1')
    return subprocess.run(
        [sys.executable, '-m', 'ding.entry.cli', *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_missing_config_file_is_one_line_error(tmp_path):
    result = run_ding(['-m', 'serial', '-c', 'no_such_config.py'], tmp_path)
    assert result.returncode == 2
    assert "config file 'no_such_config.py' not found" in result.stderr
    assert 'Traceback' not in result.stderr


def test_broken_config_file_names_the_file(tmp_path):
    broken = tmp_path / 'broken_config.py'
    broken.write_text('main_config = dict(\n')
    result = run_ding(['-m', 'serial', '-c', str(broken)], tmp_path)
    assert result.returncode == 2
    assert 'broken_config.py' in result.stderr
    assert 'Traceback' not in result.stderr


def test_typo_in_config_key_fails_before_any_work(tmp_path):
    text = open(DQN_CONFIG).read().replace('learning_rate=0.001', 'learning_rat=0.001')
    cfg = tmp_path / 'typo_config.py'
    cfg.write_text(text)
    result = run_ding(['-m', 'serial', '-c', str(cfg), '-s', '0'], tmp_path)
    assert result.returncode == 2
    assert 'policy.learn.learning_rat' in result.stderr
    assert 'learning_rate' in result.stderr  # the closest valid key is suggested
    assert not (tmp_path / 'cartpole_dqn_seed0' / 'ckpt').exists()


def test_query_registry_lists_builtin_components(tmp_path):
    result = run_ding(['--query-registry', 'policy'], tmp_path)
    assert result.returncode == 0, result.stderr
    for name in ('dqn', 'ppo', 'a2c', 'dqn_command'):
        assert name in result.stdout


@pytest.mark.parametrize('flag', ['--query-registry', '-q'])  # -q REGISTRY: DI-engine's spelling
def test_query_registry_lists_environments_of_installed_packages(tmp_path, flag):
    # dizoo declares its environments in the 'ding.components' entry-point group; ding itself never names dizoo
    result = run_ding([flag, 'env'], tmp_path)
    assert result.returncode == 0, result.stderr
    assert 'cartpole' in result.stdout and 'pendulum' in result.stdout


@pytest.mark.parametrize('flag', ['--version', '-v'])  # a lone -v: DI-engine's spelling; with a mode it is verbose
def test_version(tmp_path, flag):
    result = run_ding([flag], tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith('ding ')


def test_usage_errors_and_help_keep_their_exit_codes_and_output(tmp_path):
    # argparse usage errors exit 2, --help exits 0, both with their output
    bad = run_ding(['-m', 'nonsense'], tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'nonsense'" in bad.stderr
    helped = run_ding(['--help'], tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith('usage: ding')


@pytest.fixture(scope='module')
def serial_run(tmp_path_factory):
    """One short ``ding -m serial`` run (30 iterations), read by the output test and the eval-mode test."""
    workdir = tmp_path_factory.mktemp('serial_run')
    return workdir, run_ding(['-m', 'serial', '-c', DQN_CONFIG, '-s', '3', '--train-iter', '30'], workdir)


def test_serial_run_with_iteration_limit_writes_outputs(serial_run):
    workdir, result = serial_run
    assert result.returncode == 0, result.stderr[-3000:]
    exp = workdir / 'cartpole_dqn_seed3'
    assert (exp / 'total_config.py').is_file()
    assert any((exp / 'log').rglob('*_logger.txt'))
    assert any(p.name.startswith('events.out.tfevents') for p in (exp / 'log').rglob('*'))
    from tests.helpers.learner_policies import read_tb_events  # everything written before the process left

    assert read_tb_events(str(exp / 'log'))['evaluator_iter/reward_mean'][0][0] == 0  # the first evaluation
    assert (exp / 'ckpt').is_dir() and any((exp / 'ckpt').glob('*.safetensors'))
    summary = [line for line in result.stderr.splitlines() if line.startswith('[ding] cartpole_dqn_seed3')]
    assert summary and ('train iters 30' in summary[-1] or 'SOLVED' in summary[-1])


def test_eval_mode_loads_a_checkpoint(serial_run, tmp_path):
    workdir, train = serial_run
    assert train.returncode == 0, train.stderr[-3000:]
    ckpts = sorted((workdir / 'cartpole_dqn_seed3' / 'ckpt').glob('*.safetensors'))
    assert ckpts
    result = run_ding(
        ['-m', 'eval', '-c', DQN_CONFIG, '-s', '0', '--load-path', str(ckpts[-1]), '--exp-name', 'cartpole_dqn_eval'],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'mean return' in result.stderr


def test_eval_mode_reports_an_unusable_checkpoint_in_one_line(tmp_path):
    corrupt = tmp_path / 'iteration_5.safetensors'
    corrupt.write_bytes(b'not a checkpoint')
    manifest = tmp_path / 'iteration_5.manifest.json'
    manifest.write_text('{"a": ' * 2000 + '1' + '}' * 2000)
    absent = tmp_path / 'absent.safetensors'
    for path, named, reason in ((corrupt, manifest, 'nested too deeply'), (absent, absent, 'file not found')):
        result = run_ding(['-m', 'eval', '-c', DQN_CONFIG, '--load-path', str(path)], tmp_path)
        assert result.returncode == 1, result.stderr[-3000:]
        assert 'Traceback' not in result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith('ding: error:')]
        assert len(errors) == 1 and str(named) in errors[0] and reason in errors[0], result.stderr[-3000:]
    missing = run_ding(['-m', 'eval', '-c', DQN_CONFIG], tmp_path)
    assert missing.returncode == 2 and 'Traceback' not in missing.stderr and '--load-path' in missing.stderr


def test_the_cli_module_loads_no_pipeline():
    # Each pipeline is imported for its own mode only: `ding ctl`, `ding -q` and `ding --help` stay light, and a
    # serial run never loads Flask and the coordinator.
    probe = "import sys, ding.entry.cli; print(sorted(m for m in ('torch', 'flask', 'requests') if m in sys.modules))"
    out = subprocess.run([sys.executable, '-c', probe], env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == '[]'


def test_an_interrupted_run_names_the_checkpoint_that_exists(tmp_path, monkeypatch):
    import torch

    from ding.entry.cli import checkpoint_summary
    from ding.utils.checkpoint import save_checkpoint

    monkeypatch.chdir(tmp_path)
    assert checkpoint_summary('exp', time.time()) == 'no checkpoint exists under ./exp'
    earlier = save_checkpoint('exp/ckpt/iteration_10', {'last_iter': 10, 'w': torch.zeros(2)})
    started = time.time() + 1e-3
    time.sleep(0.01)
    # The interrupt checkpoint could not be written (say, a full disk): the summary says so, and names the older.
    assert checkpoint_summary('exp', started) == (
        f'no checkpoint of this run in ./exp/ckpt; the newest earlier one: ./{earlier}'
    )
    written = save_checkpoint('exp/ckpt/interrupt_iteration_12', {'last_iter': 12, 'w': torch.zeros(2)})
    os.makedirs('exp/ckpt_learner1')  # a parallel learner that wrote nothing yet
    assert checkpoint_summary('exp', started) == (
        f'checkpoint written by this run: ./{written}; no checkpoint of this run in ./exp/ckpt_learner1 '
        '(and none from earlier)'
    )


def test_ctrl_c_ends_a_serial_run_naming_its_interrupt_checkpoint(tmp_path):
    import signal

    from tests.helpers.wait import wait_until

    proc = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'serial', '-c', DQN_CONFIG, '-s', '0'],
        cwd=tmp_path,
        env=child_env(DING_PROGRESS='0', OMP_NUM_THREADS='1'),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = tmp_path / 'cartpole_dqn_seed0' / 'log'
        wait_until(lambda: log.is_dir() and any(log.rglob('*_logger.txt')), 180, what='training', proc=proc)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err[-3000:]
        assert (
            'ding: interrupted; checkpoint written by this run: ./cartpole_dqn_seed0/ckpt/interrupt_iteration_' in err
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_rank_flags_are_checked_before_any_rank_starts(tmp_path):
    for args, message in (
        (
            ['-m', 'eval', '--nproc', '2'],
            '--nproc runs -m {serial,serial_onpolicy,async} on several ranks, not -m eval',
        ),
        (['-m', 'serial', '--nproc', '0'], '--nproc must be >= 1, got 0'),
        (['-m', 'serial', '--nproc', '2', '--min-nproc', '3'], '--min-nproc must be between 1 and --nproc (2), got 3'),
        (['-m', 'serial', '--nproc', '2', '--max-restarts', '-1'], '--max-restarts must be >= 0, got -1'),
    ):
        result = run_ding([*args, '-c', DQN_CONFIG], tmp_path)
        assert result.returncode == 2 and f'ding: error: {message}' in result.stderr, result.stderr[-2000:]
    assert not list(tmp_path.iterdir())  # nothing started, nothing written
