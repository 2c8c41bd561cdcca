from collections import namedtuple

import numpy as np
import pytest
import torch

from ding.policy import A2CPolicy

Timestep = namedtuple('Timestep', ['obs', 'reward', 'done', 'info'])


def make_policy(**learn):
    cfg = dict(
        type='a2c',
        model=dict(
            obs_shape=2,
            action_shape=3,
            encoder_hidden_size_list=[16, 16],
            actor_head_hidden_size=16,
            critic_head_hidden_size=16,
        ),
        learn=dict(batch_size=32, learning_rate=0.01, **learn),
    )
    return A2CPolicy(cfg)


def one_step_episodes(policy, n, best_action=2):
    """n one-step episodes acted in one batched forward; ``best_action`` earns 1."""
    obs = {i: np.random.randn(2).astype(np.float32) for i in range(n)}
    out = policy.collect_mode.forward(obs)
    samples = []
    for i, o in obs.items():
        ts = Timestep(o, float(out[i]['action'] == best_action), True, {})
        samples += policy.collect_mode.get_train_sample([policy.collect_mode.process_transition(o, out[i], ts)])
    return samples


def test_samples_carry_advantages_and_drop_next_obs():
    policy = make_policy()
    samples = one_step_episodes(policy, 3)
    for s in samples:
        # terminated one-step episode: adv = r - V(s)
        assert s['adv'].item() == pytest.approx(s['reward'].item() - s['value'].item(), abs=1e-6)
        assert 'next_obs' not in s


def test_one_pass_of_minibatches_with_clipped_gradients():
    torch.manual_seed(0)
    policy = make_policy(grad_norm=0.5)
    infos = policy.learn_mode.forward(one_step_episodes(policy, 70))
    steps = {int(s['step']) for s in policy._optimizer.state_dict()['state'].values()}
    assert steps == {3}  # ceil(70 / 32) minibatches, one pass
    assert len(infos) == 3  # one log dict per optimizer step: the learner counts each as an iteration
    assert all(set(policy.learn_mode.monitor_vars()) <= set(info) for info in infos)


def test_a2c_learns_a_bandit():
    torch.manual_seed(0)
    np.random.seed(0)
    policy = make_policy()
    for _ in range(30):
        policy.learn_mode.forward(one_step_episodes(policy, 32))
    obs = {i: np.random.randn(2).astype(np.float32) for i in range(10)}
    assert all(v['action'] == 2 for v in policy.eval_mode.forward(obs).values())
