"""A small real env and a small real policy for the worker tests.

``CounterEnv``: fixed-length episodes; obs = [step, episode, env seed, 1]; reward 1 when the action
equals ``good_action``; optionally raises once at a given step (to exercise the manager's restart).
``TinyPolicy``: a linear Q-model over the obs, greedy in eval mode, eps-greedy in collect mode, with a
command mode decaying eps with envstep; ``on_policy`` from its config.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch

from ding.envs.env.base_env import BaseEnv, BaseEnvTimestep
from ding.envs.env_manager.base_env_manager import BaseEnvManager
from ding.policy.base_policy import Policy
from ding.utils.collate import default_collate


class CounterEnv(BaseEnv):
    def __init__(self, episode_len: int = 5, good_action: int = 1, crash: dict[str, int] | None = None) -> None:
        super().__init__({})
        self._len = episode_len
        self._good = good_action
        # shared between the env and its replacement: {'left': n} crashes happen at step crash['at']
        self._crash = crash
        self._seed = 0
        self._episode = -1
        self._t = 0
        self._ret = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self._t, self._episode, self._seed, 1.0], dtype=np.float32)

    def reset(self) -> np.ndarray:
        self._episode += 1
        self._t = 0
        self._ret = 0.0
        return self._obs()

    def step(self, action: Any) -> BaseEnvTimestep:
        a = int(action.item() if hasattr(action, 'item') else action)
        if self._crash is not None and self._crash['left'] > 0 and self._t == self._crash['at']:
            self._crash['left'] -= 1
            raise RuntimeError('CounterEnv: simulated crash')
        self._t += 1
        reward = 1.0 if a == self._good else 0.0
        self._ret += reward
        done = self._t >= self._len
        info = {'eval_episode_return': self._ret} if done else {}
        return BaseEnvTimestep(self._obs(), np.array([reward], dtype=np.float32), done, info)

    def seed(self, seed: int, dynamic_seed: bool = True) -> None:
        self._seed = seed

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return 'CounterEnv'

    @property
    def observation_space(self) -> Any:
        return None

    @property
    def action_space(self) -> Any:
        return None

    @property
    def reward_space(self) -> Any:
        return None


def make_manager(
    env_num: int,
    episode_len: int = 5,
    crash_env: int | None = None,
    crash_at: int = 2,
    seed: int = 0,
    lens: list[int] | None = None,
) -> BaseEnvManager:
    """A real ``BaseEnvManager`` over ``CounterEnv``s (env ``crash_env`` raises once at step ``crash_at``)."""
    crash = {'left': 1, 'at': crash_at}
    fns = [
        partial(CounterEnv, lens[i] if lens else episode_len, 1, crash if i == crash_env else None)
        for i in range(env_num)
    ]
    mgr = BaseEnvManager(fns, dict(retry_waiting_time=0.0))
    mgr.seed(seed, dynamic_seed=False)
    return mgr


class TinyPolicy(Policy):
    config = dict(
        type='tiny',
        on_policy=False,
        collect=dict(n_sample=16, unroll_len=1),
        learn=dict(learning_rate=0.01),
        eval=dict(),
        other=dict(eps=dict(start=1.0, end=0.1, decay=100)),
    )

    def __init__(self, cfg: dict | None = None, enable_field: list[str] | None = None) -> None:
        merged = self.default_config()
        for k, v in (cfg or {}).items():
            if isinstance(v, dict) and k in merged:
                merged[k].update(v)
            else:
                merged[k] = v
        super().__init__(merged, model=torch.nn.Linear(4, 2), enable_field=enable_field)
        self.collect_kwargs_seen: list[dict[str, Any]] = []
        self.train_sample_calls: list[list[dict[str, Any]]] = []
        self.reset_calls: list[list[int] | None] = []

    def prefer(self, action: int) -> None:
        """Make the greedy action ``action`` whatever the observation."""
        with torch.no_grad():
            self._model.weight.zero_()
            self._model.bias.copy_(torch.tensor([1.0, 0.0] if action == 0 else [0.0, 1.0]))

    def _init_learn(self) -> None:
        self._optimizer = torch.optim.SGD(self._model.parameters(), lr=self._cfg.learn.learning_rate)

    def _init_collect(self) -> None:
        self._n_sample = self._cfg.collect.n_sample
        self._unroll_len = self._cfg.collect.unroll_len

    def _init_eval(self) -> None:
        pass

    def _q(self, data: dict[int, Any]) -> tuple[list[int], torch.Tensor]:
        ids = list(data)
        obs = torch.as_tensor(np.stack([np.asarray(data[i]) for i in ids]), dtype=torch.float32)
        with torch.no_grad():
            q = self._model(obs)
        return ids, q

    def _forward_collect(self, data: dict[int, Any], eps: float = 0.0) -> dict[int, dict[str, Any]]:
        self.collect_kwargs_seen.append({'eps': eps})
        ids, q = self._q(data)
        action = q.argmax(-1)
        rand = torch.rand(len(ids)) < eps
        action = torch.where(rand, torch.randint(0, 2, (len(ids),)), action)
        return {i: {'action': action[k], 'q_value': q[k]} for k, i in enumerate(ids)}

    def _forward_eval(self, data: dict[int, Any]) -> dict[int, dict[str, Any]]:
        ids, q = self._q(data)
        return {i: {'action': q[k].argmax(-1)} for k, i in enumerate(ids)}

    def _forward_learn(self, data: Any) -> dict[str, Any]:
        batch = default_collate(data, keys=['obs', 'action', 'reward']) if isinstance(data, list) else data
        q = self._model(batch['obs']).gather(1, batch['action'].view(-1, 1)).squeeze(1)
        loss = ((q - batch['reward']) ** 2).mean()
        self._optimizer.zero_grad()
        loss.backward()
        self._optimizer.step()
        return {'total_loss': loss.item(), 'cur_lr': self._cfg.learn.learning_rate}

    def _process_transition(self, obs: Any, policy_output: dict[str, Any], timestep: Any) -> dict[str, Any]:
        return {
            'obs': torch.as_tensor(obs),
            'next_obs': torch.as_tensor(timestep.obs),
            'action': policy_output['action'],
            'reward': torch.as_tensor(timestep.reward).view(()),
            'done': bool(timestep.done),
        }

    def _get_train_sample(self, transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.train_sample_calls.append(list(transitions))
        return list(transitions)

    def _reset_collect(self, data_id: list[int] | None = None) -> None:
        self.reset_calls.append(data_id)

    def _get_setting_collect(self, command_info: dict[str, Any]) -> dict[str, Any]:
        eps = self._cfg.other.eps
        frac = min(1.0, command_info['envstep'] / eps.decay)
        return {'eps': eps.start + (eps.end - eps.start) * frac}
