"""R2D2: DI-engine's config keys, per-env recurrent state while collecting, the learn step's loss and priorities
against a step-by-step computation, no gradient through the burn-in, and a short serial CartPole run."""

import copy
from functools import partial

import numpy as np
import pytest
import torch

from ding.policy import R2D2Policy
from ding.rl_utils import get_sequence_train_sample, value_inv_transform, value_transform
from tests.helpers.serial_solve import solve_config

MODEL = dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[16, 8])


def make_policy(learn=None, **cfg):
    torch.manual_seed(0)
    cfg.setdefault('burnin_step', 2)
    cfg.setdefault('learn_unroll_len', 3)
    cfg.setdefault('nstep', 2)
    return R2D2Policy(dict(model=dict(MODEL), learn=dict(batch_size=4, **(learn or {})), **cfg))


def sequences(policy, lengths=(8, 5), seed=0):
    """Sequence samples of random episodes, with random stored states (as if collected mid-training)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for length in lengths:
        traj = [
            {
                'obs': torch.randn(4, generator=g),
                'next_obs': torch.randn(4, generator=g),
                'action': torch.randint(0, 2, (), generator=g),
                'reward': torch.rand((), generator=g) * 3,
                'done': i == length - 1,
                'prev_state': (torch.randn(8, generator=g), torch.randn(8, generator=g)),
            }
            for i in range(length)
        ]
        for i in range(1, length):  # a trajectory's obs follow on
            traj[i]['obs'] = traj[i - 1]['next_obs']
        out += get_sequence_train_sample(traj, policy._burnin_step, 3, policy._nstep, policy._gamma)
    return out


def test_default_config_follows_di_engine_keys():
    cfg = R2D2Policy.default_config()
    assert (cfg.burnin_step, cfg.learn_unroll_len, cfg.nstep, cfg.discount_factor) == (2, 40, 5, 0.997)
    assert cfg.learn.value_rescale is True and cfg.learn.target_update_theta == 0.001
    assert cfg.collect.traj_len_inf is True and cfg.other.eps.end == 0.05
    assert make_policy().default_model() == ('drqn', ['ding.model.template.q_learning'])
    with pytest.raises(ValueError, match='collect.unroll_len'):
        make_policy(collect=dict(unroll_len=10))
    with pytest.raises(ValueError, match='policy.unroll_len is not used'):
        make_policy(unroll_len=80)  # DI-engine's older name of the trained length


def test_collect_keeps_each_envs_state_until_its_reset():
    policy = make_policy(enable_field=['collect', 'eval'])
    collect = policy.collect_mode
    obs = {0: np.ones(4, np.float32), 3: np.zeros(4, np.float32)}
    first = collect.forward(obs, eps=0.0)
    assert all(not out['prev_state'][0].any() for out in first.values())  # a new env starts from zeros
    second = collect.forward(obs, eps=0.0)
    with torch.no_grad():
        after_one = policy._model({'obs': torch.ones(1, 4), 'prev_state': None}, inference=True)['next_state']
    torch.testing.assert_close(second[0]['prev_state'][0], after_one[0][0])
    torch.testing.assert_close(second[0]['prev_state'][1], after_one[1][0])
    collect.reset([0])
    third = collect.forward(obs, eps=0.0)
    assert not third[0]['prev_state'][0].any() and third[3]['prev_state'][0].any()
    # eval keeps its own states
    policy.eval_mode.forward({0: np.ones(4, np.float32)})
    assert collect.forward({0: np.ones(4, np.float32)}, eps=0.0)[0]['prev_state'][0].any()


def test_serial_collector_stores_the_state_at_each_sequence_start(tmp_path, monkeypatch):
    from ding.envs.env_manager.base_env_manager import BaseEnvManager
    from ding.worker.collector import SampleSerialCollector
    from dizoo.classic_control.cartpole.envs.cartpole_env import CartPoleEnv

    monkeypatch.chdir(tmp_path)  # the collector's log directory
    policy = make_policy(enable_field=['collect'], burnin_step=1)
    env = BaseEnvManager([partial(CartPoleEnv, {}) for _ in range(2)])
    env.seed(0)
    collector = SampleSerialCollector(dict(), env, policy.collect_mode, exp_name='r2d2_test')
    try:
        assert collector.traj_len == float('inf')  # whole episodes: policy.collect.traj_len_inf
        samples = collector.collect(n_sample=12, drop_extra=False)
    finally:
        collector.close()
    checked = 0
    for a, b in zip(samples, samples[1:]):
        if a['env_id'] != b['env_id'] or b['burnin_mask'].sum() == 0 or a['prev_state'][0].any():
            continue
        # ``a`` starts its episode from zeros at its obs[1]; ``b``'s stored state is the one before its burn-in
        # observation, 3 steps later (learn_unroll_len 3, burn-in 1): replaying ``a`` gets there
        with torch.no_grad():
            state = policy._model({'obs': a['obs'][1:3].unsqueeze(1), 'prev_state': None})['next_state']
        torch.testing.assert_close(state[0][0], b['prev_state'][0])
        torch.testing.assert_close(b['obs'][0], a['obs'][3])
        checked += 1
    assert checked >= 2


def test_learn_loss_and_priorities_match_a_step_by_step_computation():
    policy = make_policy(priority=True, discount_factor=0.9, learn=dict(priority_eta=0.7))
    with torch.no_grad():  # a target net that differs from the online one (as it does after some updates)
        for p in policy._target_model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    online, target = copy.deepcopy(policy._model), copy.deepcopy(policy._target_model)
    data = sequences(policy)
    info = policy.learn_mode.forward(copy.deepcopy(data))

    burnin, gamma, eta = 2, 0.9, 0.7
    total, count, priorities = 0.0, 0, []
    with torch.no_grad():
        for s in data:
            states = {}
            for name, net in (('online', online), ('target', target)):
                state = (s['prev_state'][0].unsqueeze(0), s['prev_state'][1].unsqueeze(0))
                for t in range(burnin):
                    if s['burnin_mask'][t]:
                        state = net({'obs': s['obs'][t : t + 1], 'prev_state': state}, inference=True)['next_state']
                qs = []
                for t in range(burnin, len(s['obs'])):
                    out = net({'obs': s['obs'][t : t + 1], 'prev_state': state}, inference=True)
                    qs.append(out['logit'][0])
                    state = out['next_state']
                states[name] = qs
            errors = []
            for t in range(3):
                if not s['mask'][t]:
                    continue
                k = int(s['bootstrap_step'][t])
                best = int(states['online'][t + k].argmax())
                ret = sum(gamma**i * float(s['reward'][t, i]) for i in range(2))
                if not s['done'][t]:
                    ret += gamma**k * float(value_inv_transform(states['target'][t + k][best]))
                errors.append(
                    float(value_transform(torch.tensor(ret))) - float(states['online'][t][int(s['action'][t])])
                )
            total += sum(e * e for e in errors)
            count += len(errors)
            abs_errors = [abs(e) for e in errors]
            priorities.append(eta * max(abs_errors) + (1 - eta) * sum(abs_errors) / len(abs_errors))
    assert info['total_loss'] == pytest.approx(total / count, rel=1e-4)
    assert info['priority'] == pytest.approx(priorities, rel=1e-4)


def test_burn_in_gets_no_gradient_and_is_weights_scale_the_loss():
    policy = make_policy()
    data = sequences(policy)
    for s in data:
        s['obs'].requires_grad_(True)
    policy.learn_mode.forward(data)
    full = [s for s in data if s['burnin_mask'].all()]
    assert full
    for s in full:
        assert not s['obs'].grad[:2].any()  # burn-in observations: no gradient
        assert s['obs'].grad[2:5].abs().sum() > 0  # trained steps: gradient

    half = make_policy(priority=True, priority_IS_weight=True)
    plain = make_policy(priority=True)
    batch = sequences(plain, seed=3)
    weighted = [dict(s, IS=torch.tensor(0.5)) for s in batch]
    loss = plain.learn_mode.forward(copy.deepcopy(batch))['total_loss']
    assert half.learn_mode.forward(weighted)['total_loss'] == pytest.approx(0.5 * loss, rel=1e-5)


@pytest.mark.slow
def test_serial_cartpole_run_learns(tmp_path, monkeypatch, capsys):
    summary, best = solve_config(
        'dizoo.classic_control.cartpole.config.cartpole_r2d2_config', tmp_path, monkeypatch, capsys, stop_value=100,
        max_env_step=30000,
    )  # fmt: skip
    assert 'SOLVED' in summary and best >= 100, summary
