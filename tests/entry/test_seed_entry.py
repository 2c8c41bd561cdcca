"""The SEED pipeline end to end: real actor processes (EnvPool CartPole), central inference, DQN and IMPALA."""

from __future__ import annotations

import copy
import os

import pytest

from ding.config import ConfigError, read_config
from ding.entry.seed_entry import check_seed_config, seed_pipeline
from dizoo.classic_control.cartpole.config import cartpole_seed_a2c_config, cartpole_seed_dqn_config
from tests.helpers.processes import child_pids

DQN = (cartpole_seed_dqn_config.main_config, cartpole_seed_dqn_config.create_config)
LSTM_CONFIG = os.path.join(os.path.dirname(cartpole_seed_a2c_config.__file__), 'cartpole_seed_lstm_config.py')


def _config(pair, **seed_section):
    main, create = copy.deepcopy(pair[0]), copy.deepcopy(pair[1])
    main.policy.seed.update(seed_section)
    return main, create


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    yield
    assert not child_pids('ding.worker.seed.actor_main')


@pytest.mark.parametrize(
    ('seed_section', 'policy', 'message'),
    [
        (dict(max_batchs=8), {}, r'policy\.seed\.max_batchs.*max_batch'),
        (dict(max_wait_us=-1), {}, r'policy\.seed\.max_wait_us = int -1 is out of range'),
        (dict(actor_num=0), {}, r'policy\.seed\.actor_num = int 0 is out of range'),
        ({}, dict(nstep=0), r'policy\.nstep = 0: expected an int >= 1'),
    ],
)
def test_a_bad_seed_config_is_refused_naming_the_key(seed_section, policy, message):
    main, _ = _config(DQN, **seed_section)
    main.policy.update(policy)
    with pytest.raises(ConfigError, match=message):
        check_seed_config(main, 'dqn')


def test_a_recurrent_q_network_is_refused_before_any_work(tmp_path):
    main, create = _config(DQN)
    main.policy.model.lstm_hidden_size = 32
    with pytest.raises(ConfigError, match='lstm_hidden_size: SEED DQN runs feed-forward Q networks only'):
        seed_pipeline((main, create), seed=0)
    assert not os.listdir(tmp_path)  # nothing written, no process started


def test_seed_dqn_trains_from_the_actors_transitions_and_every_actor_exits(capsys):
    main, create = _config(DQN, env_per_actor=4, unroll_len=4)
    main.policy.nstep = 3  # n-step transitions (reward vectors, value_gamma) through DQN's loss
    main.policy.eval.evaluator.eval_freq = 0
    main.policy.learn.update_per_collect = 10  # two rounds of updates once the buffer holds a batch
    policy = seed_pipeline((main, create), seed=0, max_train_iter=20)
    assert policy is not None
    err = capsys.readouterr().err
    summary = [line for line in err.splitlines() if line.startswith('[ding] ')][-1]
    assert 'not solved (max_train_iter reached)' in summary and 'train iters 20' in summary
    assert os.path.exists(f'{main.exp_name}/ckpt/iteration_20.safetensors')


def test_seed_impala_with_an_lstm_core_trains_from_the_actors_unrolls(capsys):
    # The recurrent path end to end (the kept states themselves are checked in tests/worker/seed/test_acting.py);
    # its learning is measured by benchmarks/seed_solve.py (seeds 0-2 solved) rather than asserted here: an LSTM run
    # once stayed at return 9.5 for 60k env steps in a gate (actor processes make each run's data order differ).
    main, create, _ = read_config(LSTM_CONFIG)
    seed_pipeline((main, create), seed=0, max_train_iter=20)
    summary = [line for line in capsys.readouterr().err.splitlines() if line.startswith('[ding] ')][-1]
    assert 'not solved (max_train_iter reached)' in summary and 'train iters 20' in summary
    assert os.path.exists(f'{main.exp_name}/ckpt/iteration_20.safetensors')


@pytest.mark.slow
def test_seed_a2c_solves_cartpole(capsys):
    main, create, _ = read_config(cartpole_seed_a2c_config.__file__)
    seed_pipeline((main, create), seed=0, max_env_step=200_000)
    summary = [line for line in capsys.readouterr().err.splitlines() if line.startswith('[ding] ')][-1]
    assert 'SOLVED' in summary, summary
