"""DI-engine's own CartPole DQN and PPO config files (tests/entry/di_engine_configs, verbatim) compile and run with
the ``ding`` command; their DI-engine-only keys map onto ding's (the 'deque' buffer module, ``resume_training``)
or are refused naming the key."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.processes import ROOT, child_env

FIXTURES = os.path.join(ROOT, 'tests', 'entry', 'di_engine_configs')


def run_ding(args, cwd):
    env = child_env(DING_PROGRESS='0', OMP_NUM_THREADS='1')
    return subprocess.run(
        [sys.executable, '-m', 'ding.entry.cli', *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def train_iters(result):
    return int(re.search(r'train iters (\d+)', result.stderr + result.stdout).group(1))


def with_learn_key(tmp_path, value):
    """The PPO fixture with DI-engine's ``policy.learn.resume_training`` set to ``value``, as a config file of its
    own (the fixture sets it to False)."""
    path = tmp_path / 'cartpole_ppo_resume_config.py'
    text = open(os.path.join(FIXTURES, 'cartpole_ppo_config.py')).read()
    assert text.count('resume_training=False,') == 1
    path.write_text(text.replace('resume_training=False,', f'resume_training={value!r},'))
    return str(path)


@pytest.mark.slow
def test_the_dqn_config_with_the_deque_buffer_module_runs_a_few_iterations(tmp_path):
    config = os.path.join(FIXTURES, 'cartpole_dqn_deque_config.py')
    result = run_ding(['-m', 'serial', '-c', config, '-s', '0', '--train-iter', '3'], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'max_train_iter reached' in result.stderr + result.stdout
    assert list((tmp_path / 'cartpole_dqn_seed0' / 'ckpt').glob('iteration_*.safetensors'))


@pytest.mark.slow
def test_the_ppo_config_runs_and_resume_training_continues_from_its_newest_checkpoint(tmp_path):
    first = run_ding(['-m', 'serial_onpolicy', '-c', with_learn_key(tmp_path, False), '--train-iter', '3'], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_ding(['-m', 'serial_onpolicy', '-c', with_learn_key(tmp_path, True), '--train-iter', '3'], tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    # the second run starts from the first's counters (a fresh start would end at the first's count)
    assert train_iters(second) >= train_iters(first) + 3
    # the resumed run kept its directory (no second one beside it)
    assert [p.name for p in tmp_path.glob('cartpole_ppo*') if p.is_dir()] == ['cartpole_ppo_seed0']


def test_a_bad_resume_training_value_is_refused_naming_the_key(tmp_path):
    result = run_ding(['-m', 'serial_onpolicy', '-c', with_learn_key(tmp_path, 'yes')], tmp_path)
    assert result.returncode != 0
    assert "policy.learn.resume_training must be True or False, got 'yes'" in result.stderr
