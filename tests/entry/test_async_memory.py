"""A memory task on the async pipeline: CartPole with the velocities masked (only cart position and pole angle
are observed). With the LSTM core the APPO policy on the impala_vac model recovers the velocities from consecutive
observations and balances the pole; the feed-forward model cannot, and stays far below on as many env steps as
the LSTM run took.

Measured (2-core machine shared with other jobs, seed 0): LSTM eval return 123 at 64k env steps, 500 at 80k (141 s
wall); feed-forward 40-45 from 16k to 96k env steps (37 s).
"""

import re

import pytest
import torch

from ding.entry import async_pipeline
from ding.envs.vector import make_vector_env
from ding.worker.async_actor import VectorEvaluator

ENV = dict(
    env_id='CartPole-v1',
    backend='envpool',
    wrappers=['mask_velocity'],
    evaluator_env_num=8,
    n_evaluator_episode=8,
)
THRESHOLD = 150.0  # mean greedy return; the feed-forward model stays far below on this budget
ENV_STEP_BUDGET = 128_000


def masked_cartpole_appo(exp_name: str, lstm_hidden_size: int | None) -> tuple[dict, dict]:
    main = dict(
        exp_name=exp_name,
        env=dict(ENV, stop_value=THRESHOLD),
        policy=dict(
            model=dict(
                obs_shape=2,
                action_shape=2,
                encoder_hidden_size_list=[64, 64],
                lstm_hidden_size=lstm_hidden_size,
                share_encoder=False,
            ),
            learn=dict(
                batch_size=1,
                learning_rate=0.001,
                epoch_per_collect=4,
                discount_factor=0.98,
                lambda_=0.8,
                entropy_weight=0.0,
                learner=dict(hook=dict(log_show_after_iter=10_000, save_ckpt_after_iter=1_000_000)),
            ),
            eval=dict(evaluator=dict(eval_freq=400)),
            async_actor=dict(actor_num=2, env_per_actor=8, unroll_len=20, trajectory_queue_size=8),
        ),
    )
    return main, dict(policy=dict(type='appo'))


def greedy_return(policy, seed: int = 123) -> float:
    env = make_vector_env(ENV, 8, seed, for_eval=True)
    evaluator = VectorEvaluator(env, policy, n_episode=16, seed=seed)
    try:
        _, info = evaluator.eval(policy.actor_weights())
    finally:
        evaluator.close()
    return info['eval_episode_return_mean']


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')


@pytest.mark.slow
def test_lstm_learns_masked_cartpole_and_feedforward_does_not(capfd):
    torch.manual_seed(0)
    lstm = async_pipeline(masked_cartpole_appo('masked_lstm', 64), seed=0, max_env_step=ENV_STEP_BUDGET)
    lstm_return = greedy_return(lstm)
    summary = re.search(r'\[ding\] masked_lstm: .* \| env steps (\d+) \|', capfd.readouterr().err)
    assert summary, 'no summary line from the LSTM run'
    lstm_env_steps = int(summary[1])
    # The feed-forward model gets the env steps the LSTM model needed, not the whole budget: it plateaus early.
    torch.manual_seed(0)
    feedforward = async_pipeline(masked_cartpole_appo('masked_ff', None), seed=0, max_env_step=lstm_env_steps)
    feedforward_return = greedy_return(feedforward)
    # Re-evaluated on other episodes than the run's own evaluations (which stop it at THRESHOLD): a policy that
    # reached 150 there scored 121 here once, so the bar is lower; the feed-forward model stays near 45.
    assert lstm_return >= 100.0, (lstm_return, feedforward_return)
    assert feedforward_return < 75.0, (lstm_return, feedforward_return)
    assert lstm_return > 1.5 * feedforward_return, (lstm_return, feedforward_return)
