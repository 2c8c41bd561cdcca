"""A memory task on the async pipeline: CartPole with the velocities masked (only cart position and pole angle
are observed). With the LSTM core of the impala_vac model, IMPALA and APPO recover the velocities from
consecutive observations and balance the pole; the feed-forward model cannot, and stays far below on as many env
steps as the LSTM run took.

Measured (2-core machine, seed 0): APPO's LSTM eval return 123 at 64k env steps, 500 at 80k (141 s wall, shared
with other jobs); feed-forward 40-45 from 16k to 96k env steps (37 s). IMPALA (batches of 4 unrolls): the LSTM
solved 24 of 24 runs within 64k-224k env steps (15-37 s each, two runs at a time); the feed-forward model's
greedy return stayed at 40-45 up to 320k env steps.
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
QUIET_LEARNER = dict(hook=dict(log_show_after_iter=10_000, save_ckpt_after_iter=1_000_000))
# Per policy: the learn section, the evaluation period (learner iterations) and the env-step budget.
POLICIES = {
    'appo': (
        dict(batch_size=1, learning_rate=0.001, epoch_per_collect=4, lambda_=0.8, entropy_weight=0.0),
        dict(trajectory_queue_size=8),
        400,
        128_000,
    ),
    'impala': (
        # 4 unrolls per batch: with 2 the LSTM sometimes plateaued near 110-140 within 300k env steps. Entropy 0.01:
        # with 0.001 about one run in eight collapsed to always pushing one way and never recovered.
        dict(batch_size=4, learning_rate=0.002, lambda_=0.95, entropy_weight=0.01, value_weight=0.5, grad_norm=0.5),
        dict(trajectory_queue_size=2, double_buffer=False),
        50,
        320_000,
    ),
}


def masked_cartpole(policy_type: str, exp_name: str, lstm_hidden_size: int | None) -> tuple[dict, dict]:
    learn, async_actor, eval_freq, _ = POLICIES[policy_type]
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
            learn=dict(learn, discount_factor=0.98, learner=QUIET_LEARNER),
            eval=dict(evaluator=dict(eval_freq=eval_freq)),
            async_actor=dict(async_actor, actor_num=2, env_per_actor=8, unroll_len=20),
        ),
    )
    return main, dict(policy=dict(type=policy_type))


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
@pytest.mark.parametrize('policy_type', ['impala', 'appo'])
def test_lstm_learns_masked_cartpole_and_feedforward_does_not(policy_type, capfd):
    budget = POLICIES[policy_type][3]
    torch.manual_seed(0)
    lstm = async_pipeline(masked_cartpole(policy_type, 'masked_lstm', 64), seed=0, max_env_step=budget)
    lstm_return = greedy_return(lstm)
    lstm_log = capfd.readouterr().err
    summary = re.search(r'\[ding\] masked_lstm: .* \| env steps (\d+) \|', lstm_log)
    assert summary, f'no summary line from the LSTM run:\n{lstm_log}'
    lstm_env_steps = int(summary[1])
    # The feed-forward model gets the env steps the LSTM model needed, not the whole budget: it plateaus early.
    torch.manual_seed(0)
    feedforward = async_pipeline(masked_cartpole(policy_type, 'masked_ff', None), seed=0, max_env_step=lstm_env_steps)
    feedforward_return = greedy_return(feedforward)
    # Re-evaluated on other episodes than the run's own evaluations (which stop it at THRESHOLD): a policy that
    # reached 150 there scored 121 here once, so the bar is lower; the feed-forward model stays near 45.
    # The LSTM run's evaluations go into the message: async runs are not repeatable, so its log is the only record.
    lstm_evaluations = '\n'.join(line for line in lstm_log.splitlines() if line.startswith(('[eval]', '[ding]')))
    assert lstm_return >= 100.0, (lstm_return, feedforward_return, lstm_evaluations)
    assert feedforward_return < 75.0, (lstm_return, feedforward_return)
    assert lstm_return > 1.5 * feedforward_return, (lstm_return, feedforward_return)
