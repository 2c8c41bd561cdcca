"""SAC: config keys, one learn step checked against an independent computation, entropy tuning, acting modes,
and a short serial Pendulum run that learns."""

import copy
import math
from collections import namedtuple

import pytest
import torch

from ding.policy import SACPolicy, create_policy
from ding.rl_utils import tanh_gaussian_sample
from ding.utils.collate import default_collate
from tests.helpers.serial_solve import solve_config

Timestep = namedtuple('Timestep', ['obs', 'reward', 'done', 'info'])
MODEL = dict(obs_shape=3, action_shape=1, actor_head_hidden_size=32, critic_head_hidden_size=32)
# Overrides that keep the serial runs short (SAC and TD3).
SMALL = dict(model=dict(actor_head_hidden_size=64, critic_head_hidden_size=64), learn=dict(batch_size=64))


def make_policy(**learn):
    return SACPolicy(dict(model=dict(MODEL), random_collect_size=0, learn=dict(batch_size=16, **learn)))


def batch(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        {
            'obs': torch.randn(3, generator=g),
            'next_obs': torch.randn(3, generator=g),
            'action': torch.rand(1, generator=g) * 2 - 1,
            'reward': torch.randn((), generator=g),
            'done': i % 5 == 0,
        }
        for i in range(n)
    ]


def test_default_config_follows_di_engine_keys():
    cfg = SACPolicy.default_config()
    assert cfg.model.twin_critic and cfg.model.action_space == 'reparameterization'
    assert {'learning_rate_q', 'learning_rate_policy', 'learning_rate_alpha', 'auto_alpha', 'target_theta'} <= set(
        cfg.learn
    )
    policy = create_policy(dict(type='sac', model=dict(MODEL)), enable_field=['eval'])
    assert policy.default_model() == ('continuous_qac', ['ding.model.template.qac'])


def test_learn_step_matches_an_independent_computation():
    torch.manual_seed(0)
    policy = make_policy(alpha=0.3, auto_alpha=False, discount_factor=0.9, target_theta=0.1)
    model = policy._model
    before = copy.deepcopy(model)
    target_before = copy.deepcopy(policy._target_model)
    data = batch()
    b = default_collate(data)

    torch.manual_seed(7)
    info = policy.learn_mode.forward(data)
    # The same step by hand: a' from the actor at s' (same random draw), the smaller target critic, the bonus.
    torch.manual_seed(7)
    mu, sigma = before(b['next_obs'], mode='compute_actor')['logit']
    next_action, next_logp = (x.detach() for x in tanh_gaussian_sample(mu, sigma))
    q_next = target_before({'obs': b['next_obs'], 'action': next_action}, mode='compute_critic')['q_value']
    q1_next, q2_next = (q.detach() for q in q_next)
    expected_target = []
    for i in range(16):
        bootstrap = (
            0.0 if b['done'][i] else 0.9 * (min(float(q1_next[i]), float(q2_next[i])) - 0.3 * float(next_logp[i]))
        )
        expected_target.append(float(b['reward'][i]) + bootstrap)
    q1, q2 = (q.detach() for q in before({'obs': b['obs'], 'action': b['action']}, mode='compute_critic')['q_value'])
    expected_loss = sum((float(q1[i]) - t) ** 2 + (float(q2[i]) - t) ** 2 for i, t in enumerate(expected_target)) / 16
    assert info['critic_loss'] == pytest.approx(expected_loss, rel=1e-4)
    assert info['target_q_value'] == pytest.approx(sum(expected_target) / 16, rel=1e-4)
    assert info['alpha'] == pytest.approx(0.3) and 'alpha_loss' not in info
    # Soft target update: target = 0.9 * old target + 0.1 * new online weights.
    for name, t in policy._target_model.state_dict().items():
        expected = 0.9 * target_before.state_dict()[name] + 0.1 * model.state_dict()[name]
        assert torch.allclose(t, expected, atol=1e-6), name


def test_auto_alpha_follows_the_entropy_target():
    torch.manual_seed(0)
    # A target entropy far above the policy's: alpha must grow; far below: it must shrink.
    for target_entropy, grows in ((10.0, True), (-10.0, False)):
        policy = make_policy(alpha=0.2, target_entropy=target_entropy, learning_rate_alpha=0.01)
        alphas = [policy.learn_mode.forward(batch(seed=k))['alpha'] for k in range(5)]
        assert (alphas[-1] > 0.2) is grows, alphas
    assert make_policy()._target_entropy == -1.0  # default: -|A|


def test_collect_starts_uniform_then_samples_and_eval_is_deterministic():
    torch.manual_seed(0)
    policy = SACPolicy(dict(model=dict(MODEL), random_collect_size=4))
    obs = {0: torch.zeros(3), 1: torch.ones(3)}
    for _ in range(3):  # 2 random steps (4 env steps), then the actor's samples
        out = policy.collect_mode.forward(obs)
        assert set(out) == {0, 1} and all(
            o['action'].shape == (1,) and o['action'].abs().max() <= 1 for o in out.values()
        )
    first = policy.eval_mode.forward(obs)
    assert torch.equal(first[1]['action'], policy.eval_mode.forward(obs)[1]['action'])
    mu = policy._model(torch.ones(1, 3), mode='compute_actor')['logit'][0].detach()
    assert float(first[1]['action']) == pytest.approx(math.tanh(float(mu)), abs=1e-6)
    timestep = Timestep(torch.ones(3), 1.5, True, {'TimeLimit.truncated': True})
    transition = policy.collect_mode.process_transition(obs[0], out[0], timestep)
    assert transition['done'] is False  # a truncation bootstraps
    assert policy.collect_mode.get_train_sample([transition]) == [transition]


def test_state_dict_round_trip_keeps_alpha_and_targets():
    torch.manual_seed(0)
    policy = make_policy()
    for k in range(3):
        policy.learn_mode.forward(batch(seed=k))
    fresh = make_policy()
    fresh.learn_mode.load_state_dict(policy.learn_mode.state_dict())
    data = batch(seed=9)
    torch.manual_seed(1)
    a = policy.learn_mode.forward(data)
    torch.manual_seed(1)
    b = fresh.learn_mode.forward(data)
    assert a['critic_loss'] == pytest.approx(b['critic_loss']) and a['alpha'] == pytest.approx(b['alpha'])


@pytest.mark.slow
def test_serial_pendulum_run_learns(tmp_path, monkeypatch, capsys):
    # A random policy scores about -1400; smaller networks and batches than the config's keep the run short
    # (about 2000 env steps), and it stops at the bar.
    summary, best = solve_config(
        'dizoo.classic_control.pendulum.config.pendulum_sac_config', tmp_path, monkeypatch, capsys, stop_value=-900,
        max_env_step=3200, policy=SMALL,
    )  # fmt: skip
    assert 'SOLVED' in summary and best > -900, summary
