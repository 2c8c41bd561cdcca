"""Shared collect / eval / sample logic of the on-policy actor-critic policies (PPO, A2C) on a VAC model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn

from ding.config.merge import deep_merge_dicts
from ding.rl_utils.gae import gae, gae_data

from .base_policy import Policy
from .common_utils import (
    check_unroll_len,
    has_mode_dependent_layers,
    obs_to_tensor,
    reward_to_tensor,
    stack_obs,
    terminated,
)


class OnPolicyActorCriticBase(Policy):
    """Collect: sample from the actor and record ``logit`` and the critic's ``value``. Train samples: GAE
    advantages over each trajectory segment, bootstrapping with ``V(next_obs)`` of the segment's last transition
    unless it terminated (a time-limit truncation or a segment cut by the collector bootstraps).

    Subclasses implement ``_init_learn`` / ``_forward_learn`` and set ``_keep_next_obs`` (needed when advantages
    are recomputed at learn time) and ``_value_scale()`` (value-normalisation scale, 1.0 without it).
    """

    def __init__(self, cfg: dict, model: nn.Module | None = None, enable_field: list[str] | None = None) -> None:
        merged = deep_merge_dicts(type(self).default_config(), cfg)
        check_unroll_len(merged, type(self).__name__)
        if merged.get('continuous') is True and 'action_space' not in merged.model:  # older DI-engine flag
            merged.action_space = 'continuous'
        super().__init__(merged, model, enable_field)

    def default_model(self) -> tuple[str, list[str]]:
        return 'vac', ['ding.model.template.vac']

    def _create_model(self, cfg, model: nn.Module | None) -> nn.Module:
        # The policy-level ``action_space`` configures a default VAC that does not name its own.
        if model is None and cfg.model.get('type', 'vac') == 'vac' and 'action_space' not in cfg.model:
            cfg.model.action_space = cfg.get('action_space', 'discrete')
        model = super()._create_model(cfg, model)
        # The model is the source of truth for the action space (the mode initialisers run right after this).
        self._action_space = getattr(model, 'action_space', cfg.get('action_space', 'discrete'))
        if self._action_space not in ('discrete', 'continuous'):
            raise ValueError(
                f"{type(self).__name__}: action_space must be 'discrete' or 'continuous', got {self._action_space!r}"
            )
        self._mode_sensitive = has_mode_dependent_layers(model)
        return model

    def _value_scale(self) -> float:
        return 1.0

    _keep_next_obs = False

    # ---- collect --------------------------------------------------------------------------------
    def _init_collect(self) -> None:
        cfg = self._cfg
        self._gamma = float(cfg.collect.discount_factor)
        self._gae_lambda = float(cfg.collect.gae_lambda)
        self._ignore_done = bool(cfg.learn.get('ignore_done', False))

    def _forward_collect(self, data: dict[int, Any], **kwargs: Any) -> dict[int, dict[str, Any]]:
        """Sample actions for ``{env_id: obs}`` with one batched actor-critic forward."""
        env_ids = list(data.keys())
        obs = stack_obs(list(data.values()), self._device)
        if self._mode_sensitive:
            self._model.eval()
        with torch.no_grad():
            out = self._model(obs, 'compute_actor_critic')
            logit, value = out['logit'], out['value']
            if self._action_space == 'discrete':
                # Gumbel-max: argmax(logit + Gumbel noise) is a sample from softmax(logit).
                action = (logit - torch.empty_like(logit).exponential_().log()).argmax(dim=-1)
            else:
                action = logit['mu'] + logit['sigma'] * torch.randn_like(logit['mu'])
        if self._mode_sensitive:
            self._model.train()
        if self._cuda:
            value, action = value.cpu(), action.cpu()
            logit = {k: v.cpu() for k, v in logit.items()} if isinstance(logit, dict) else logit.cpu()
        # unbind: one call yields every per-env view (cheaper than indexing each row)
        actions, values = action.unbind(0), value.unbind(0)
        if isinstance(logit, dict):
            mus, sigmas = logit['mu'].unbind(0), logit['sigma'].unbind(0)
            return {
                env_id: {'action': actions[i], 'logit': {'mu': mus[i], 'sigma': sigmas[i]}, 'value': values[i]}
                for i, env_id in enumerate(env_ids)
            }
        logits = logit.unbind(0)
        return {
            env_id: {'action': actions[i], 'logit': logits[i], 'value': values[i]} for i, env_id in enumerate(env_ids)
        }

    def _process_transition(self, obs: Any, policy_output: dict[str, Any], timestep: Any) -> dict[str, Any]:
        return {
            'obs': obs_to_tensor(obs),
            'next_obs': obs_to_tensor(timestep.obs),
            'action': policy_output['action'],
            'logit': policy_output['logit'],
            'value': policy_output['value'],
            'reward': reward_to_tensor(timestep.reward),
            'done': terminated(timestep),
        }

    def _get_train_sample(self, transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Add ``adv`` (GAE) and ``traj_flag`` (last transition of the segment) to each transition."""
        if not transitions:
            return []
        T = len(transitions)
        values = torch.stack([t['value'] for t in transitions]).float()
        # one tensor from a list of numbers: far cheaper than a tensor per reward, and the same float32 values
        rewards = torch.tensor([_number(t['reward']) for t in transitions], dtype=torch.float32)
        if self._ignore_done:
            dones = torch.zeros(T)
        else:
            dones = torch.tensor([bool(t['done']) for t in transitions], dtype=torch.float32)
        if dones[-1] > 0:
            last_value = torch.zeros(1)
        else:
            last_value = self._critic_value(transitions[-1]['next_obs'].unsqueeze(0))
        next_values = torch.cat([values[1:], last_value])
        scale = self._value_scale()
        if scale != 1.0:  # a normalised critic predicts value / scale
            values, next_values = values * scale, next_values * scale
        traj_flag = torch.zeros(T)
        traj_flag[-1] = 1.0
        adv = gae(gae_data(values, next_values, rewards, dones, traj_flag), self._gamma, self._gae_lambda)
        keep_next_obs = self._keep_next_obs
        advs = adv.unbind(0)  # one call for every per-transition view
        for i, t in enumerate(transitions):
            t['adv'] = advs[i]
            t['traj_flag'] = i == T - 1
            if not keep_next_obs:
                t.pop('next_obs', None)
        return transitions

    def _critic_value(self, obs: torch.Tensor) -> torch.Tensor:
        if self._mode_sensitive:
            self._model.eval()
        with torch.no_grad():
            value = self._model(obs.to(self._device), 'compute_critic')['value'].float().cpu()
        if self._mode_sensitive:
            self._model.train()
        return value.reshape(1)

    # ---- eval -----------------------------------------------------------------------------------
    def _init_eval(self) -> None:
        pass

    def _forward_eval(self, data: dict[int, Any]) -> dict[int, dict[str, Any]]:
        """Greedy actions: the most likely discrete action, or the Gaussian mean."""
        env_ids = list(data.keys())
        obs = stack_obs(list(data.values()), self._device)
        if self._mode_sensitive:
            self._model.eval()
        with torch.no_grad():
            logit = self._model(obs, 'compute_actor')['logit']
        if self._mode_sensitive:
            self._model.train()
        if isinstance(logit, dict):
            actions = (logit['mu'].cpu() if self._cuda else logit['mu']).unbind(0)
            return {env_id: {'action': actions[i]} for i, env_id in enumerate(env_ids)}
        action = logit.argmax(dim=-1)
        if self._cuda:
            action, logit = action.cpu(), logit.cpu()
        actions, logits = action.unbind(0), logit.unbind(0)
        return {env_id: {'action': actions[i], 'logit': logits[i]} for i, env_id in enumerate(env_ids)}


def _number(x: Any) -> float:
    """A python number from a 0-d / one-element tensor or array, or a number."""
    return x.item() if hasattr(x, 'item') else float(x)


def minibatch_indices(n: int, batch_size: int, device: torch.device) -> Iterator[torch.Tensor]:
    """Shuffled index batches covering ``n`` samples once; the last batch is filled up to ``batch_size`` with
    earlier samples rather than being a small remainder (keeps per-batch advantage normalisation stable)."""
    perm = torch.randperm(n, device=device)
    if n <= batch_size:
        yield perm
        return
    for start in range(0, n, batch_size):
        if start + batch_size > n:
            yield perm[n - batch_size :]
        else:
            yield perm[start : start + batch_size]


def index_batch(data: dict[str, Any], idx: torch.Tensor) -> dict[str, Any]:
    """Select rows ``idx`` of every tensor (and of nested ``{'mu', 'sigma'}`` dicts)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, torch.Tensor):
            out[k] = v[idx]
        elif isinstance(v, dict):
            out[k] = {kk: vv[idx] for kk, vv in v.items()}
    return out


def collate_keys(first: dict[str, Any], keys: list[str], optional: tuple[str, ...] = ('weight',)) -> list[str]:
    """The learn keys plus the optional ones the samples carry."""
    return keys + [k for k in optional if k in first]
