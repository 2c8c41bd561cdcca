"""What C51 and QR-DQN share: DQN's acting, target network and samples; a distributional loss in place of the
squared TD error."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch

from ding.utils.collate import default_collate

from .dqn import DQNPolicy

# (obs, next_obs, action, reward (nstep, B) or (B,), done, weight or None, value_gamma or None)
LearnBatch = tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None
]


class DistributionalDQNPolicy(DQNPolicy):
    """DQN whose model also returns a return distribution per action (its ``'logit'`` stays the expected Q, so
    collecting and evaluating are DQN's). Subclasses implement ``_distributional_loss``; the next action is
    picked by the online network (double DQN) and scored by the target network, as in ``dqn``.
    """

    def _learn_batch(self, data: Any) -> LearnBatch:
        if isinstance(data, (list, tuple)):
            keys = self._learn_keys + [k for k in ('IS', 'weight') if k in data[0]]
            data = default_collate(list(data), keys)
        obs, next_obs, action, reward, done = (data[k] for k in ('obs', 'next_obs', 'action', 'reward', 'done'))
        weight = data.get('IS') if self._priority_IS_weight else data.get('weight')
        value_gamma = data.get('value_gamma')
        if self._cuda:
            obs, next_obs, action, reward, done = (x.to(self._device) for x in (obs, next_obs, action, reward, done))
            weight = None if weight is None else weight.to(self._device)
            value_gamma = None if value_gamma is None else value_gamma.to(self._device)
        if reward.dim() == 2:  # (B, nstep) samples -> time-major (nstep, B)
            reward = reward.t()
        if self._ignore_done:
            done = torch.zeros_like(reward[0] if reward.dim() == 2 else reward)
        return obs, next_obs, action, reward, done, weight, value_gamma

    def _forward_learn(self, data: Any) -> dict[str, Any]:
        obs, next_obs, action, reward, done, weight, value_gamma = self._learn_batch(data)
        if self._mode_sensitive:
            self._model.train()
        output = self._model(obs)
        with torch.no_grad():
            next_action = self._model(next_obs)['logit'].argmax(dim=-1)
            target_output = self._target_model(next_obs)
        loss, per_sample = self._distributional_loss(
            output, target_output, action, next_action, reward, done, weight, value_gamma
        )
        self._optimizer.zero_grad(set_to_none=True)
        self.backward_and_sync_gradients(
            loss, self._model, weight=obs.shape[0]
        )  # data parallel: mean over every rank's batch
        self._optimizer.step()
        self._update_target()
        info = {
            'cur_lr': self._optimizer.param_groups[0]['lr'],
            'total_loss': loss.item(),
            'q_value': output['logit'].detach().mean().item(),
            'target_q_value': target_output['logit'].mean().item(),
        }
        if self._priority:
            info['priority'] = per_sample.detach().abs().cpu().numpy().tolist()
        return info

    @abstractmethod
    def _distributional_loss(
        self,
        output: dict[str, torch.Tensor],
        target_output: dict[str, torch.Tensor],
        action: torch.Tensor,
        next_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        weight: torch.Tensor | None,
        value_gamma: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, per-sample loss (B,))`` from the online output at ``obs`` and the target output at ``next_obs``."""
