from collections import namedtuple

import numpy as np
import pytest
import torch

from ding.policy import PPOPolicy, create_policy

Timestep = namedtuple('Timestep', ['obs', 'reward', 'done', 'info'])
DISCRETE = dict(
    obs_shape=4,
    action_shape=2,
    encoder_hidden_size_list=[32, 32],
    actor_head_hidden_size=32,
    critic_head_hidden_size=32,
)
CONTINUOUS = dict(
    obs_shape=3,
    action_shape=1,
    action_space='continuous',
    encoder_hidden_size_list=[32, 32],
    actor_head_hidden_size=32,
    critic_head_hidden_size=32,
    actor_head_layer_num=0,
    critic_head_layer_num=0,
    sigma_type='conditioned',
    bound_type='tanh',
)


def make_policy(model=DISCRETE, **kw):
    cfg = dict(
        type='ppo',
        model=dict(model),
        learn=dict(epoch_per_collect=2, batch_size=16, learning_rate=3e-3),
        collect=dict(discount_factor=0.9, gae_lambda=0.95),
    )
    for k, v in kw.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    return PPOPolicy(cfg)


def rollout(policy, steps, last_info, reward_fn=lambda o, a: 1.0, obs_dim=4, seed=0):
    """One trajectory of ``steps`` transitions; the last step ends with ``last_info`` (None: cut, not done)."""
    rng = np.random.RandomState(seed)
    obs = rng.randn(obs_dim).astype(np.float32)
    traj = []
    for t in range(steps):
        out = policy.collect_mode.forward({0: obs})[0]
        nxt = rng.randn(obs_dim).astype(np.float32)
        last = t == steps - 1
        done = last and last_info is not None
        ts = Timestep(nxt, np.array([reward_fn(obs, out['action'])], np.float32), done, last_info or {})
        traj.append(policy.collect_mode.process_transition(obs, out, ts))
        obs = nxt
    return traj


def expected_adv(values, rewards, last_value, gamma, lam):
    adv, acc = [], 0.0
    next_values = values[1:] + [last_value]
    for t in reversed(range(len(values))):
        acc = rewards[t] + gamma * next_values[t] - values[t] + gamma * lam * acc
        adv.append(acc)
    return adv[::-1]


@pytest.mark.parametrize('ending', ['terminated', 'truncated', 'cut'])
def test_train_samples_gae_bootstraps_unless_terminated(ending):
    torch.manual_seed(0)
    policy = make_policy(learn=dict(value_norm=False))
    info = {'terminated': {}, 'truncated': {'TimeLimit.truncated': True}, 'cut': None}[ending]
    traj = rollout(policy, 3, info)
    values = [t['value'].item() for t in traj]
    with torch.no_grad():
        v_last = policy._model(traj[-1]['next_obs'][None], 'compute_critic')['value'].item()
    last_value = 0.0 if ending == 'terminated' else v_last
    samples = policy.collect_mode.get_train_sample(traj)
    assert [s['adv'].item() for s in samples] == pytest.approx(
        expected_adv(values, [1.0] * 3, last_value, 0.9, 0.95), abs=1e-5
    )
    assert [s['traj_flag'] for s in samples] == [False, False, True]
    assert samples[-1]['done'] is (ending == 'terminated')
    assert 'next_obs' in samples[0]  # kept: recompute_adv needs it


def test_learn_runs_all_epochs_and_minibatches_in_one_call():
    torch.manual_seed(0)
    policy = make_policy(learn=dict(epoch_per_collect=3, batch_size=16))
    samples = policy.collect_mode.get_train_sample(rollout(policy, 40, {}))
    infos = policy.learn_mode.forward(samples)
    assert len(infos) == 3 * 3  # one log dict per optimizer step: the learner counts each as an iteration
    assert all(set(policy.learn_mode.monitor_vars()) <= set(info) for info in infos)
    assert all(np.isfinite(v) for info in infos for v in info.values())
    steps = {int(s['step']) for s in policy._optimizer.state_dict()['state'].values()}
    assert steps == {3 * 3}  # 3 epochs x ceil(40 / 16) minibatches


def bandit_step(policy, n, reward_fn, obs_dim):
    """n one-step episodes acted in one batched forward; the better action earns more."""
    obs = {i: np.random.randn(obs_dim).astype(np.float32) for i in range(n)}
    out = policy.collect_mode.forward(obs)
    samples = []
    for i, o in obs.items():
        ts = Timestep(o, reward_fn(o, out[i]['action']), True, {})
        samples += policy.collect_mode.get_train_sample([policy.collect_mode.process_transition(o, out[i], ts)])
    return policy.learn_mode.forward(samples)


@pytest.mark.parametrize('recompute_adv', [True, False])
def test_discrete_policy_learns_the_better_action(recompute_adv):
    torch.manual_seed(0)
    policy = make_policy(recompute_adv=recompute_adv, learn=dict(epoch_per_collect=4))
    for _ in range(8):
        bandit_step(policy, 64, lambda o, a: float(a == 1), 4)
    obs = {i: np.random.randn(4).astype(np.float32) for i in range(20)}
    logits = torch.stack([v['logit'] for v in policy.eval_mode.forward(obs).values()])
    assert torch.softmax(logits, -1)[:, 1].mean() > 0.9
    assert all(v['action'] == 1 for v in policy.eval_mode.forward(obs).values())


def test_continuous_policy_moves_its_mean_toward_the_reward_peak():
    torch.manual_seed(0)
    policy = make_policy(model=CONTINUOUS, action_space='continuous', learn=dict(epoch_per_collect=4))
    out = policy.collect_mode.forward({0: np.zeros(3, np.float32), 1: np.ones(3, np.float32)})
    assert out[0]['action'].shape == (1,) and set(out[0]['logit']) == {'mu', 'sigma'}
    for _ in range(10):
        info = bandit_step(policy, 64, lambda o, a: -float((a.item() - 0.5) ** 2), 3)
    assert all('sigma_mean' in i for i in info)
    mu = policy.eval_mode.forward({0: np.zeros(3, np.float32)})[0]['action'].item()
    assert abs(mu - 0.5) < 0.2


def test_policy_level_action_space_configures_the_default_model():
    model = {k: v for k, v in CONTINUOUS.items() if k != 'action_space'}
    policy = create_policy(dict(type='ppo', action_space='continuous', model=model))
    assert policy._model.action_space == 'continuous'


def test_state_dict_round_trip_keeps_value_normalisation(tmp_path):
    torch.manual_seed(0)
    policy = make_policy()
    policy.learn_mode.forward(policy.collect_mode.get_train_sample(rollout(policy, 20, {})))
    torch.save(policy.learn_mode.state_dict(), tmp_path / 'ppo.pth')
    state = torch.load(tmp_path / 'ppo.pth', weights_only=True)
    other = make_policy()
    other.learn_mode.load_state_dict(state)
    assert other._running_mean_std.state_dict() == pytest.approx(policy._running_mean_std.state_dict())
    x = torch.randn(3, 4)
    assert torch.equal(other._model(x, 'compute_critic')['value'], policy._model(x, 'compute_critic')['value'])


def test_priority_is_rejected():
    with pytest.raises(ValueError, match='priority'):
        make_policy(priority=True)
