"""Greedy evaluation on a vectorised env: whole episodes only, reset steps not counted, the best return kept."""

import pytest
import torch

from ding.worker.async_actor import VectorEvaluator
from tests.helpers.async_toys import LinearActorPolicy, ScriptedVectorEnv


def test_the_returns_are_those_of_whole_episodes_in_the_order_they_end():
    policy = LinearActorPolicy()
    env = ScriptedVectorEnv([3, 5])  # every step rewards 1: an episode's return is its length
    evaluator = VectorEvaluator(env, policy, n_episode=4, seed=0, stop_value=4.0)
    stop, info = evaluator.eval(policy.actor_weights())
    # env 0 ends at steps 3 and 7 (step 4 is its reset step), env 1 at step 5, env 0 again at step 11
    assert info['eval_episode_return_mean'] == pytest.approx((3 + 5 + 3 + 3) / 4)
    assert info['eval_episode_return_min'] == 3 and info['eval_episode_return_max'] == 5
    assert stop is False and evaluator.best_return == pytest.approx(3.5)
    evaluator.close()
    assert env.closed


def test_reaching_the_stop_value_stops_and_the_best_return_is_kept():
    policy = LinearActorPolicy()
    evaluator = VectorEvaluator(ScriptedVectorEnv([6, 6]), policy, n_episode=2, seed=0, stop_value=6)
    stop, info = evaluator.eval(policy.actor_weights())
    assert stop and info['eval_episode_return_mean'] == 6 and evaluator.best_return == 6


def test_an_env_that_never_ends_an_episode_cannot_hang_the_evaluation():
    policy = LinearActorPolicy()
    evaluator = VectorEvaluator(ScriptedVectorEnv([10**9]), policy, n_episode=1, seed=0, max_steps=50)
    with pytest.raises(RuntimeError, match='50 steps without 1 finished episodes'):
        evaluator.eval(policy.actor_weights())


def test_a_numpy_actor_plays_the_same_greedy_episodes_as_the_torch_model():
    torch.manual_seed(0)
    weights = LinearActorPolicy().actor_weights()
    played = {}
    for numpy in (False, True):
        policy, env = LinearActorPolicy(numpy=numpy), ScriptedVectorEnv([3, 5, 4])
        evaluator = VectorEvaluator(env, policy, n_episode=6, seed=0)
        evaluator.eval(weights)
        played[numpy] = [a.tolist() for a in env.actions_seen]
    assert played[True] == played[False]
