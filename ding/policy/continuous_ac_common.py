"""What SAC and TD3 share: a ``continuous_qac`` model with a soft-updated target copy, uniform random actions
for the first ``random_collect_size`` env steps, transitions for the replay buffer and batch collation."""

from __future__ import annotations

import copy
from abc import abstractmethod
from typing import Any

import torch
import torch.nn as nn

from ding.config.merge import deep_merge_dicts
from ding.utils.collate import default_collate

from .base_policy import Policy
from .common_utils import check_unroll_len, obs_to_tensor, reward_to_tensor, stack_obs, terminated

LearnBatch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]


class ContinuousActorCriticBase(Policy):
    """Off-policy actor-critic for actions in [-1, 1] (the env scales them: Pendulum's ``act_scale``).

    Subclasses set ``config`` and implement ``_init_learn``, ``_forward_learn``, ``_act(obs)`` (exploring
    actions) and ``_greedy(obs)`` (evaluation actions). Samples are transitions ``obs``, ``next_obs``,
    ``action`` (A,), ``reward``, ``done`` (True only for a real termination: a time-limit truncation bootstraps).
    """

    _learn_keys = ('obs', 'next_obs', 'action', 'reward', 'done')

    def __init__(self, cfg: dict, model: nn.Module | None = None, enable_field: list[str] | None = None) -> None:
        cfg = deep_merge_dicts(type(self).default_config(), cfg)
        check_unroll_len(cfg, type(self).__name__)
        nstep = cfg.get('nstep', 1)
        if int(nstep) != 1:
            raise NotImplementedError(f'{type(self).__name__}: policy.nstep={nstep} is not supported (use 1)')
        super().__init__(cfg, model, enable_field)

    def default_model(self) -> tuple[str, list[str]]:
        return 'continuous_qac', ['ding.model.template.qac']

    # ---- learn helpers ----------------------------------------------------------------------------
    def _actor_and_critic(self) -> tuple[nn.Module, nn.Module]:
        """The model's ``actor`` and ``critic`` sub-modules (each gets its own optimizer)."""
        actor, critic = getattr(self._model, 'actor', None), getattr(self._model, 'critic', None)
        if not isinstance(actor, nn.Module) or not isinstance(critic, nn.Module):
            raise TypeError(
                f'{type(self).__name__}: the model needs actor and critic sub-modules (like continuous_qac), '
                f'got {type(self._model).__name__}'
            )
        return actor, critic

    def _init_target(self, target_theta: float) -> None:
        self._target_theta = float(target_theta)
        self._target_model = copy.deepcopy(self._model)
        for p in self._target_model.parameters():
            p.requires_grad_(False)
        pairs = zip(
            self._target_model.state_dict(keep_vars=True).values(), self._model.state_dict(keep_vars=True).values()
        )
        floats = [(t, o) for t, o in pairs if t.is_floating_point()]
        self._target_tensors = [t for t, _ in floats]
        self._online_tensors = [o for _, o in floats]

    def _soft_update_target(self) -> None:
        """``target <- (1 - target_theta) * target + target_theta * online``."""
        with torch.no_grad():
            torch._foreach_lerp_(self._target_tensors, self._online_tensors, self._target_theta)

    def _learn_batch(self, data: Any, ignore_done: bool, use_is_weight: bool) -> LearnBatch:
        """``(obs, next_obs, action, reward, done, weight)`` on the policy's device from samples or a batch."""
        if isinstance(data, (list, tuple)):
            extra = [k for k in ('IS', 'weight') if k in data[0]]
            data = default_collate(list(data), list(self._learn_keys) + extra)
        obs, next_obs, action, reward, done = (data[k] for k in self._learn_keys)
        weight = data.get('IS') if use_is_weight else data.get('weight')
        if self._cuda:
            obs, next_obs, action, reward, done = (x.to(self._device) for x in (obs, next_obs, action, reward, done))
            weight = None if weight is None else weight.to(self._device)
        action = action.float()
        if action.dim() == 1:  # (B,) actions of a one-dimensional action space
            action = action.unsqueeze(-1)
        reward = reward.float().reshape(-1)
        done = torch.zeros_like(reward) if ignore_done else done.float().reshape(-1)
        return obs.float(), next_obs.float(), action, reward, done, weight

    def _critic(self, model: nn.Module, obs: torch.Tensor, action: torch.Tensor) -> list[torch.Tensor]:
        """The critics' Q values as a list (one or two tensors (B,))."""
        q = model({'obs': obs, 'action': action}, mode='compute_critic')['q_value']
        return list(q) if isinstance(q, (list, tuple)) else [q]

    # ---- collect ----------------------------------------------------------------------------------
    def _init_collect(self) -> None:
        self._random_collect_size = int(self._cfg.get('random_collect_size', 0))
        self._collect_steps = 0
        self._action_shape = self._action_size()

    def _action_size(self) -> int:
        size = self._cfg.model.get('action_shape')
        if size is None:
            size = getattr(self._model, 'action_shape', None)
        if not isinstance(size, int):
            raise ValueError(f'{type(self).__name__}: policy.model.action_shape must be one int, got {size!r}')
        return size

    def _forward_collect(self, data: dict[int, Any], **kwargs: Any) -> dict[int, dict[str, Any]]:
        """Uniform actions for the first ``random_collect_size`` env steps, then the policy's exploring ones."""
        env_ids = list(data.keys())
        if self._collect_steps < self._random_collect_size:
            action = torch.rand(len(env_ids), self._action_shape) * 2.0 - 1.0
        else:
            self._model.eval()
            with torch.no_grad():
                action = self._act(stack_obs(list(data.values()), self._device)).cpu()
            self._model.train()
        self._collect_steps += len(env_ids)
        actions = action.unbind(0)
        return {env_id: {'action': actions[i]} for i, env_id in enumerate(env_ids)}

    @abstractmethod
    def _act(self, obs: torch.Tensor) -> torch.Tensor:
        """Exploring actions (B, A) in [-1, 1] (no gradient)."""

    def _process_transition(self, obs: Any, policy_output: dict[str, Any], timestep: Any) -> dict[str, Any]:
        return {
            'obs': obs_to_tensor(obs),
            'next_obs': obs_to_tensor(timestep.obs),
            'action': policy_output['action'],
            'reward': reward_to_tensor(timestep.reward),
            'done': terminated(timestep),
        }

    def _get_train_sample(self, transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return transitions

    # ---- eval -------------------------------------------------------------------------------------
    def _init_eval(self) -> None:
        pass

    def _forward_eval(self, data: dict[int, Any]) -> dict[int, dict[str, Any]]:
        env_ids = list(data.keys())
        self._model.eval()
        with torch.no_grad():
            action = self._greedy(stack_obs(list(data.values()), self._device)).cpu()
        self._model.train()
        actions = action.unbind(0)
        return {env_id: {'action': actions[i]} for i, env_id in enumerate(env_ids)}

    @abstractmethod
    def _greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """Evaluation actions (B, A) in [-1, 1] (no gradient)."""
