"""TD3: config keys, one learn step checked against an independent computation, delayed actor and target
updates, exploration noise. (The config reaching -250 on Pendulum is measured in benchmarks/NOTES.md; SAC's run in
test_sac shows the shared continuous actor-critic path learning through the serial pipeline.)"""

import copy

import pytest
import torch

from ding.policy import TD3Policy
from ding.utils.collate import default_collate
from tests.policy.test_sac import batch

MODEL = dict(obs_shape=3, action_shape=1, actor_head_hidden_size=32, critic_head_hidden_size=32)


def make_policy(**learn):
    return TD3Policy(dict(model=dict(MODEL), random_collect_size=0, learn=dict(batch_size=16, **learn)))


def test_default_config_follows_di_engine_keys():
    cfg = TD3Policy.default_config()
    assert cfg.model == dict(twin_critic=True, action_space='regression')
    assert cfg.learn.actor_update_freq == 2 and cfg.learn.noise_range == dict(min=-0.5, max=0.5)
    assert cfg.collect.noise_sigma == 0.1 and 'learning_rate_actor' in cfg.learn and 'learning_rate_critic' in cfg.learn


def test_critic_target_is_the_smaller_twin_at_the_target_actors_action():
    torch.manual_seed(0)
    policy = make_policy(noise=False, discount_factor=0.9)
    target = copy.deepcopy(policy._target_model)
    data = batch()
    b = default_collate(data)
    info = policy.learn_mode.forward(data)
    next_action = target(b['next_obs'], mode='compute_actor')['action']
    q1, q2 = target({'obs': b['next_obs'], 'action': next_action}, mode='compute_critic')['q_value']
    expected = [
        float(b['reward'][i]) + (0.0 if b['done'][i] else 0.9 * min(float(q1[i]), float(q2[i]))) for i in range(16)
    ]
    assert info['target_q_value'] == pytest.approx(sum(expected) / 16, rel=1e-4)


def test_actor_and_targets_move_only_every_actor_update_freq_iterations():
    torch.manual_seed(0)
    policy = make_policy(actor_update_freq=2)
    actor = [p.detach().clone() for p in policy._model.actor.parameters()]
    critic = [p.detach().clone() for p in policy._model.critic.parameters()]
    target = copy.deepcopy(policy._target_model.state_dict())

    policy.learn_mode.forward(batch(seed=1))  # iteration 1: critics only
    assert all(torch.equal(a, p) for a, p in zip(actor, policy._model.actor.parameters()))
    assert not all(torch.equal(c, p) for c, p in zip(critic, policy._model.critic.parameters()))
    assert all(torch.equal(v, policy._target_model.state_dict()[k]) for k, v in target.items())

    info = policy.learn_mode.forward(batch(seed=2))  # iteration 2: the actor and the targets too
    assert not all(torch.equal(a, p) for a, p in zip(actor, policy._model.actor.parameters()))
    assert not all(torch.equal(v, policy._target_model.state_dict()[k]) for k, v in target.items())
    assert info['actor_loss'] != 0.0


def test_collect_adds_clipped_noise_and_eval_is_the_actor():
    torch.manual_seed(0)
    policy = TD3Policy(dict(model=dict(MODEL), random_collect_size=0, collect=dict(noise_sigma=0.5)))
    obs = {i: torch.full((3,), float(i)) for i in range(4)}
    greedy = policy.eval_mode.forward(obs)
    noisy = policy.collect_mode.forward(obs)
    actor = policy._model(torch.stack(list(obs.values())), mode='compute_actor')['action']
    for i in range(4):
        assert torch.allclose(greedy[i]['action'], actor[i], atol=1e-6)
        assert noisy[i]['action'].abs().max() <= 1.0
    assert any(not torch.allclose(noisy[i]['action'], actor[i]) for i in range(4))


def test_bad_noise_range_is_refused_by_name():
    with pytest.raises(ValueError, match='noise_range'):
        make_policy(noise_range=dict(min=0.5, max=-0.5))
