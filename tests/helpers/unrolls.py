"""Unrolls in the async trajectory layout (``ding.worker.async_actor.protocol``) from a tiny torch env, so the
IMPALA / APPO policies can be trained in unit tests without the async pipeline.

``CueRecall`` is a memory task: an episode lasts ``length`` steps, the first observation shows a cue (+1 or -1),
the later ones show nothing, and only the last action is rewarded (1 when it names the cue's sign). A
feed-forward policy can do no better than chance (0.5); a recurrent one can carry the cue. Like both vector-env
backends, an env is reset on the step after its episode ended (that step's action ignored, reward 0).
"""

from __future__ import annotations

from typing import Any

import torch


class CueRecall:
    observation_shape = (2,)
    action_num = 2

    def __init__(self, num_envs: int, length: int = 3, seed: int = 0) -> None:
        self.num_envs, self.length = num_envs, length
        self._gen = torch.Generator().manual_seed(seed)
        self._t = torch.zeros(num_envs, dtype=torch.long)
        self._cue = self._new_cues(num_envs)
        self._ended = torch.zeros(num_envs, dtype=torch.bool)

    def _new_cues(self, n: int) -> torch.Tensor:
        return torch.randint(0, 2, (n,), generator=self._gen) * 2.0 - 1.0

    def _obs(self) -> torch.Tensor:
        start = self._t == 0
        return torch.stack([torch.where(start, self._cue, torch.zeros(())), start.float()], dim=1)

    def reset(self) -> torch.Tensor:
        self._t.zero_()
        self._cue = self._new_cues(self.num_envs)
        self._ended.zero_()
        return self._obs()

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        last = self._t == self.length - 1
        reward = (last & (action == (self._cue > 0).long())).float()
        done = last.clone()
        self._t += 1
        resetting = self._ended
        if resetting.any():
            reward[resetting], done[resetting] = 0.0, False
            self._t[resetting] = 0
            self._cue[resetting] = self._new_cues(int(resetting.sum()))
        self._ended = done
        return self._obs(), reward, done, torch.zeros_like(done)


class UnrollCollector:
    """Steps ``env`` with a policy's ``actor_step`` and returns unrolls as learner batches."""

    def __init__(self, policy: Any, env: CueRecall) -> None:
        self.policy, self.env = policy, env
        self.model = policy.actor_model()
        n = env.num_envs
        self._obs = env.reset()
        self._first = torch.ones(n, dtype=torch.bool)
        self._ended = torch.zeros(n, dtype=torch.bool)
        self._state = policy.initial_actor_state(n)

    def collect(self, unroll_len: int) -> dict[str, Any]:
        self.model.load_state_dict(self.policy.actor_weights())
        T, n = unroll_len, self.env.num_envs
        batch: dict[str, Any] = {
            'obs': torch.zeros(T + 1, n, *self.env.observation_shape),
            'action': torch.zeros(T, n, dtype=torch.long),
            'logit': torch.zeros(T, n, self.env.action_num),
            'reward': torch.zeros(T, n),
            'done': torch.zeros(T, n, dtype=torch.bool),
            'truncated': torch.zeros(T, n, dtype=torch.bool),
            'mask': torch.zeros(T, n),
            'first': torch.zeros(T + 1, n, dtype=torch.bool),
            'actor_state': self._state,
        }
        for t in range(T):
            batch['obs'][t], batch['first'][t] = self._obs, self._first
            batch['mask'][t] = (~self._ended).float()
            action, logit, self._state = self.policy.actor_step(self.model, self._obs, self._state, self._first)
            self._obs, reward, done, truncated = self.env.step(action)
            batch['action'][t], batch['logit'][t], batch['reward'][t] = action, logit, reward
            batch['done'][t], batch['truncated'][t] = done, truncated
            self._first = self._ended  # this step was a reset step: the next observation starts an episode
            self._ended = done | truncated
        batch['obs'][T], batch['first'][T] = self._obs, self._first
        return batch


def train_on_cue_recall(policy: Any, updates: int, num_envs: int = 32, unroll_len: int = 12, seed: int = 0) -> float:
    """Train ``policy`` for ``updates`` learner steps; the success rate (mean reward per episode) of the last
    quarter of the unrolls."""
    env = CueRecall(num_envs, seed=seed)
    collector = UnrollCollector(policy, env)
    successes, episodes = 0.0, 0
    for i in range(updates):
        batch = collector.collect(unroll_len)
        policy.learn_mode.forward(batch)
        if i >= updates * 3 // 4:
            successes += float(batch['reward'].sum())
            episodes += int(batch['done'].sum())
    return successes / max(episodes, 1)


def cue_recall_policy(policy_cls: Any, lstm_hidden_size: int | None = None, **learn: Any) -> Any:
    """A small ``impala_vac`` policy of ``policy_cls`` (IMPALA, APPO) sized for the cue-recall task."""
    cfg = dict(
        type=policy_cls.config['type'],
        model=dict(
            obs_shape=2,
            action_shape=2,
            encoder_hidden_size_list=[32],
            lstm_hidden_size=lstm_hidden_size,
            actor_head_hidden_size=32,
            critic_head_hidden_size=32,
        ),
        learn=dict(learning_rate=0.003, discount_factor=0.9, **learn),
    )
    return policy_cls(cfg)
