from collections import namedtuple

import numpy as np
import pytest
import torch

from ding.policy import DQNPolicy, create_policy
from ding.utils.collate import default_collate

Timestep = namedtuple('Timestep', ['obs', 'reward', 'done', 'info'])
MODEL = dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[32, 32, 16])


def make_policy(**overrides):
    cfg = dict(type='dqn', model=dict(MODEL), learn=dict(batch_size=32, learning_rate=0.001))
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    return DQNPolicy(cfg)


def fixed_batch(n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        {
            'obs': torch.randn(4, generator=g),
            'next_obs': torch.randn(4, generator=g),
            'action': torch.randint(0, 2, (), generator=g),
            'reward': torch.rand((), generator=g),
            'done': bool(i % 7 == 0),
            'replay_unique_id': str(i),
        }
        for i in range(n)
    ]


def test_default_config_follows_di_engine_keys():
    cfg = DQNPolicy.default_config()
    assert cfg.discount_factor == 0.97 and cfg.nstep == 1 and cfg.learn.target_update_freq == 100
    assert cfg.other.eps == dict(type='exp', start=0.95, end=0.1, decay=10000)
    assert make_policy().default_model() == ('dqn', ['ding.model.template.q_learning'])


def test_learn_steps_reduce_td_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    policy = make_policy(learn=dict(target_update_freq=10**6))  # frozen target: a plain regression problem
    data = fixed_batch()
    losses = [policy.learn_mode.forward(data)['total_loss'] for _ in range(100)]
    assert np.mean(losses[-10:]) < 0.35 * losses[0]
    info = policy.learn_mode.forward(default_collate(data))  # an already collated batch works too
    assert set(policy.learn_mode.monitor_vars()) <= set(info)
    assert 'priority' not in info


def test_hard_target_update_copies_every_freq_iterations():
    torch.manual_seed(0)
    policy = make_policy(learn=dict(target_update_freq=3))
    online, target = policy._model, policy._target_model
    data = fixed_batch()
    for step in range(1, 7):
        policy.learn_mode.forward(data)
        same = all(torch.equal(a, b) for a, b in zip(online.parameters(), target.parameters()))
        assert same == (step % 3 == 0)


def test_soft_target_update_moves_by_theta():
    torch.manual_seed(0)
    policy = make_policy(learn=dict(target_update_type='momentum', target_theta=0.25))
    before = [p.clone() for p in policy._target_model.parameters()]
    policy.learn_mode.forward(fixed_batch())
    for b, t, o in zip(before, policy._target_model.parameters(), policy._model.parameters()):
        assert torch.allclose(t, 0.75 * b + 0.25 * o, atol=1e-6)


def test_priority_is_abs_td_error_and_is_weights_scale_the_loss():
    torch.manual_seed(0)
    policy = make_policy(priority=True, priority_IS_weight=True)
    data = fixed_batch(8)
    for s in data:
        s['IS'] = torch.tensor(1.0)
    batch = default_collate(data)
    with torch.no_grad():
        q = policy._model(batch['obs'])['logit'].gather(1, batch['action'][:, None]).squeeze(1)
        next_a = policy._model(batch['next_obs'])['logit'].argmax(-1)
        next_q = policy._target_model(batch['next_obs'])['logit'].gather(1, next_a[:, None]).squeeze(1)
        target = batch['reward'] + 0.97 * (1 - batch['done'].float()) * next_q
    info = policy.learn_mode.forward(data)
    assert info['priority'] == pytest.approx((target - q).abs().tolist(), abs=1e-5)
    assert info['total_loss'] == pytest.approx(((target - q) ** 2).mean().item(), rel=1e-4)
    # zero importance weights: zero loss, and a first update leaves the network unchanged
    for s in data:
        s['IS'] = torch.tensor(0.0)
    policy = make_policy(priority=True, priority_IS_weight=True)
    params = [p.clone() for p in policy._model.parameters()]
    info = policy.learn_mode.forward(data)
    assert info['total_loss'] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(params, policy._model.parameters()))


def test_state_dict_round_trip(tmp_path):
    torch.manual_seed(0)
    policy = make_policy()
    data = fixed_batch()
    for _ in range(3):
        policy.learn_mode.forward(data)
    path = tmp_path / 'ckpt.pth'
    torch.save(policy.learn_mode.state_dict(), path)
    state = torch.load(path, weights_only=True)
    assert set(state) == {'model', 'target_model', 'optimizer'}
    other = make_policy()
    other.learn_mode.load_state_dict(state)
    obs = torch.randn(5, 4)
    assert torch.equal(policy._model(obs)['logit'], other._model(obs)['logit'])
    assert torch.equal(policy._target_model(obs)['logit'], other._target_model(obs)['logit'])
    # both continue identically: same optimizer moments
    a, b = policy.learn_mode.forward(data), other.learn_mode.forward(data)
    assert a['total_loss'] == pytest.approx(b['total_loss'])
    assert torch.equal(policy._model(obs)['logit'], other._model(obs)['logit'])


def test_collect_is_epsilon_greedy_and_eval_is_greedy():
    torch.manual_seed(0)
    policy = make_policy()
    obs = {i: np.random.randn(4).astype(np.float32) for i in range(64)}
    greedy = policy.eval_mode.forward(obs)
    collected = policy.collect_mode.forward(obs, eps=0.0)
    assert set(collected) == set(obs) and set(collected[0]) == {'action', 'logit'}
    assert all(collected[i]['action'] == greedy[i]['action'] for i in obs)
    assert all(greedy[i]['action'] == greedy[i]['logit'].argmax() for i in obs)
    rand = [policy.collect_mode.forward(obs, eps=1.0) for _ in range(10)]
    frac = np.mean([r[i]['action'].item() for r in rand for i in obs])
    assert 0.4 < frac < 0.6  # uniform over the two actions, whatever the Q values say
    # without eps the policy follows cfg.other.eps over the env steps it has acted on (starts at 0.95)
    out = policy.collect_mode.forward(obs)
    assert sum(int(out[i]['action'] != greedy[i]['action']) for i in obs) > 10


def test_transition_done_means_terminated_not_truncated():
    policy = make_policy()
    obs = np.zeros(4, np.float32)
    out = policy.collect_mode.forward({0: obs}, eps=0.0)[0]
    term = policy.collect_mode.process_transition(
        obs, out, Timestep(obs + 1, np.array([1.0], np.float32), True, {'eval_episode_return': 5.0})
    )
    trunc = policy.collect_mode.process_transition(
        obs, out, Timestep(obs + 1, 1.0, True, {'TimeLimit.truncated': True})
    )
    assert term['done'] is True and trunc['done'] is False
    assert term['reward'].shape == () and term['reward'].dtype == torch.float32
    assert term['obs'].dtype == torch.float32 and torch.equal(term['next_obs'], torch.ones(4))


def test_nstep_samples_train():
    torch.manual_seed(0)
    policy = make_policy(nstep=3)
    obs = np.zeros(4, np.float32)
    traj = []
    for t in range(5):
        out = policy.collect_mode.forward({0: obs}, eps=0.5)[0]
        nxt = obs + 0.1
        traj.append(policy.collect_mode.process_transition(obs, out, Timestep(nxt, 1.0, t == 4, {})))
        obs = nxt
    samples = policy.collect_mode.get_train_sample(traj)
    assert len(samples) == 5 and samples[0]['reward'].shape == (3,)
    assert samples[-1]['done'] and samples[-1]['value_gamma'].item() == pytest.approx(0.97)
    info = policy.learn_mode.forward(samples)
    assert np.isfinite(info['total_loss'])


def test_ignore_done_bootstraps_everywhere():
    policy = make_policy(learn=dict(ignore_done=True))
    data = fixed_batch(4)
    for s in data:
        s['done'] = True
    assert np.isfinite(policy.learn_mode.forward(data)['target_q_value'])


def test_create_policy_builds_dqn_from_a_plain_dict():
    policy = create_policy(dict(type='dqn', model=dict(MODEL)), enable_field=['collect', 'eval'])
    assert isinstance(policy, DQNPolicy)
    assert policy.collect_mode.get_attribute('cuda') is False
    with pytest.raises(AttributeError, match="'learn' is not enabled"):
        _ = policy.learn_mode
