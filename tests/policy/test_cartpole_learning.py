"""End-to-end learning checks with a minimal hand-written loop (no collector / learner): the policies alone must
solve CartPole-v0 (greedy mean return >= 195 over 5 episodes)."""

import random
from collections import deque, namedtuple

import numpy as np
import pytest
import torch

from ding.policy import DQNPolicy, PPOPolicy
from ding.rl_utils import get_epsilon_greedy_fn

gym = pytest.importorskip('gymnasium')
# CartPole-v0 (200-step episodes, the task's stop value 195) is deprecated in gymnasium but still shipped.
pytestmark = pytest.mark.filterwarnings('ignore:.*CartPole-v0 is out of date.*:DeprecationWarning')
Timestep = namedtuple('Timestep', ['obs', 'reward', 'done', 'info'])


class VecCartPole:
    def __init__(self, n, seed):
        self.envs = [gym.make('CartPole-v0') for _ in range(n)]
        self.obs = {i: e.reset(seed=seed + i)[0].astype(np.float32) for i, e in enumerate(self.envs)}
        self.trajs = {i: [] for i in range(n)}

    def collect(self, policy, n_sample, **kwargs):
        """At least n_sample transitions; every trajectory (finished or cut) becomes train samples."""
        samples, count = [], 0
        while count < n_sample:
            out = policy.collect_mode.forward(dict(self.obs), **kwargs)
            for i, o in out.items():
                obs, r, term, trunc, _ = self.envs[i].step(int(o['action']))
                ts = Timestep(
                    obs.astype(np.float32), np.array([r], np.float32), term or trunc, {'TimeLimit.truncated': trunc}
                )
                self.trajs[i].append(policy.collect_mode.process_transition(self.obs[i], o, ts))
                count += 1
                if ts.done:
                    samples += policy.collect_mode.get_train_sample(self.trajs[i])
                    self.trajs[i] = []
                    obs = self.envs[i].reset()[0].astype(np.float32)
                self.obs[i] = obs.astype(np.float32)
        for i, traj in self.trajs.items():
            if traj:
                samples += policy.collect_mode.get_train_sample(traj)
                self.trajs[i] = []
        return samples, count


def greedy_return(policy, seed, episodes=5):
    returns = []
    for k in range(episodes):
        env = gym.make('CartPole-v0')
        obs, _ = env.reset(seed=seed + k)
        total, done = 0.0, False
        while not done:
            action = policy.eval_mode.forward({0: obs.astype(np.float32)})[0]['action']
            obs, r, term, trunc, _ = env.step(int(action))
            total, done = total + r, term or trunc
        returns.append(total)
    return float(np.mean(returns))


@pytest.mark.slow
def test_dqn_solves_cartpole():
    torch.manual_seed(0)
    random.seed(0)
    policy = DQNPolicy(
        dict(
            model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[128, 128, 64]),
            discount_factor=0.97,
            learn=dict(batch_size=64, learning_rate=0.001),
        )
    )
    envs, buffer, eps_fn = VecCartPole(8, 0), deque(maxlen=20000), get_epsilon_greedy_fn(0.95, 0.1, 10000)
    envstep, it = 0, 0
    while envstep < 40000:
        samples, n = envs.collect(policy, 8, eps=eps_fn(envstep))
        buffer.extend(samples)
        envstep += n
        for _ in range(3):
            policy.learn_mode.forward(random.sample(buffer, min(64, len(buffer))))
            it += 1
            if it % 40 == 0 and greedy_return(policy, 1000 + it) >= 195:
                return
    pytest.fail('DQN did not reach 195 on CartPole-v0 within 40k env steps')


@pytest.mark.slow
def test_ppo_solves_cartpole():
    torch.manual_seed(0)
    policy = PPOPolicy(
        dict(
            model=dict(
                obs_shape=4,
                action_shape=2,
                encoder_hidden_size_list=[64, 64, 128],
                critic_head_hidden_size=128,
                actor_head_hidden_size=128,
            ),
            learn=dict(
                epoch_per_collect=2,
                batch_size=64,
                learning_rate=0.001,
                value_weight=0.5,
                entropy_weight=0.01,
                clip_ratio=0.2,
            ),
            collect=dict(n_sample=256, discount_factor=0.9, gae_lambda=0.95),
        )
    )
    envs, envstep, it = VecCartPole(8, 0), 0, 0
    while envstep < 60000:
        samples, n = envs.collect(policy, 256)
        envstep += n
        policy.learn_mode.forward(samples)
        it += 1
        if it % 2 == 0 and greedy_return(policy, 1000 + it) >= 195:
            return
    pytest.fail('PPO did not reach 195 on CartPole-v0 within 60k env steps')
