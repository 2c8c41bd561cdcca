"""PPO (clipped surrogate) on a VAC model, discrete or continuous (Gaussian) actions."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from ding.rl_utils import RunningMeanStd, ppo_data, ppo_error
from ding.rl_utils.gae import gae, gae_data
from ding.utils.collate import default_collate
from ding.utils.pytorch_ddp_dist_helper import broadcast_module
from ding.utils.registry import POLICY_REGISTRY

from .common_utils import build_adam
from .onpolicy_common import OnPolicyActorCriticBase, collate_keys, index_batch, minibatch_indices

# The per-step statistics _forward_learn stacks and logs, in the order of its rows.
LOSS_STATS = (
    'total_loss',
    'policy_loss',
    'value_loss',
    'entropy_loss',
    'adv_max',
    'adv_mean',
    'value_mean',
    'value_max',
    'approx_kl',
    'clipfrac',
)
CONTINUOUS_STATS = ('mu_mean', 'sigma_mean')


@POLICY_REGISTRY.register('ppo')
class PPOPolicy(OnPolicyActorCriticBase):
    """Proximal Policy Optimisation.

    One ``_forward_learn(data)`` call trains on a whole collected batch: ``learn.epoch_per_collect`` epochs of
    shuffled minibatches of ``learn.batch_size``. ``recompute_adv=True`` recomputes values and GAE advantages
    with the current critic at the start of each epoch (samples must then be in collection order, as the
    collector returns them). ``learn.value_norm`` scales value targets by a running std of the returns.
    ``learn.update_per_collect`` (older configs) is ignored: ``epoch_per_collect`` sets the number of passes.
    """

    config = dict(
        type='ppo',
        cuda=False,
        on_policy=True,
        priority=False,
        priority_IS_weight=False,
        action_space='discrete',
        recompute_adv=True,
        model=dict(),
        learn=dict(
            epoch_per_collect=10,
            batch_size=64,
            learning_rate=3e-4,
            value_weight=0.5,
            entropy_weight=0.0,
            clip_ratio=0.2,
            value_clip=True,
            dual_clip=None,
            adv_norm=True,
            value_norm=True,
            ppo_param_init=True,
            grad_clip_type='clip_norm',
            grad_clip_value=0.5,
            ignore_done=False,
        ),
        collect=dict(unroll_len=1, discount_factor=0.99, gae_lambda=0.95),
        eval=dict(),
        other=dict(),
    )

    @property
    def _keep_next_obs(self) -> bool:  # type: ignore[override]
        return bool(self._cfg.recompute_adv)

    def _value_scale(self) -> float:
        rms = getattr(self, '_running_mean_std', None)
        return rms.std if rms is not None else 1.0

    # ---- learn ----------------------------------------------------------------------------------
    def _init_learn(self) -> None:
        cfg, lcfg = self._cfg, self._cfg.learn
        if cfg.priority or cfg.priority_IS_weight:
            raise ValueError('PPOPolicy: priority / priority_IS_weight are not supported (on-policy data)')
        if lcfg.ppo_param_init:
            self._init_params()
            broadcast_module(self._model, src=0)  # the re-initialisation drew from each rank's own RNG
        self._optimizer = build_adam(self._model.parameters(), lcfg.learning_rate)
        self._epoch_per_collect = int(lcfg.epoch_per_collect)
        self._batch_size = int(lcfg.batch_size)
        self._value_weight = float(lcfg.value_weight)
        self._entropy_weight = float(lcfg.entropy_weight)
        self._clip_ratio = float(lcfg.clip_ratio)
        self._value_clip = bool(lcfg.get('value_clip', True))
        self._dual_clip = lcfg.get('dual_clip', None)
        self._adv_norm = bool(lcfg.adv_norm)
        self._running_mean_std = RunningMeanStd() if lcfg.get('value_norm', False) else None
        clip_type = lcfg.get('grad_clip_type', None)
        if clip_type not in (None, 'clip_norm', 'clip_value'):
            raise ValueError(
                f"policy.learn.grad_clip_type must be 'clip_norm', 'clip_value' or None, got {clip_type!r}"
            )
        self._grad_clip_type, self._grad_clip_value = clip_type, lcfg.get('grad_clip_value', None)
        self._recompute_adv = bool(cfg.recompute_adv)
        self._gamma = float(cfg.collect.discount_factor)
        self._gae_lambda = float(cfg.collect.gae_lambda)
        self._ignore_done = bool(lcfg.ignore_done)
        self._params = [p for p in self._model.parameters() if p.requires_grad]
        keys = ['obs', 'action', 'logit', 'value', 'adv']
        if self._recompute_adv:
            keys += ['next_obs', 'reward', 'done', 'traj_flag']
        self._learn_keys = keys
        self._model.train()

    def _init_params(self) -> None:
        """Orthogonal init (gain sqrt 2, zero bias); the policy output layer scaled to 0.01 so the initial policy
        is near uniform / near-zero mean; Gaussian log-sigma starts at -0.5."""
        for m in self._model.modules():
            if isinstance(m, nn.Linear):
                nn.init.orthogonal_(m.weight, gain=math.sqrt(2))
                nn.init.zeros_(m.bias)
        head = getattr(self._model, 'actor_head', None)
        if head is None:
            return
        out_layers = [head.mu] if hasattr(head, 'mu') else [m for m in head.modules() if isinstance(m, nn.Linear)][-1:]
        for layer in out_layers:
            nn.init.orthogonal_(layer.weight, gain=0.01)
        if hasattr(head, 'log_sigma_param'):
            nn.init.constant_(head.log_sigma_param, -0.5)
        if hasattr(head, 'log_sigma_layer'):
            nn.init.orthogonal_(head.log_sigma_layer.weight, gain=0.01)
            nn.init.constant_(head.log_sigma_layer.bias, -0.5)
        critic = getattr(self._model, 'critic_head', None)
        if critic is not None:
            last = [m for m in critic.modules() if isinstance(m, nn.Linear)][-1]
            nn.init.orthogonal_(last.weight, gain=1.0)

    def _recompute(self, data: dict[str, Any]) -> None:
        """Values and GAE advantages from the current critic (in place on ``data``)."""
        n = data['obs'].shape[0]
        with torch.no_grad():
            both = self._model(torch.cat([data['obs'], data['next_obs']]), 'compute_critic')['value']
        scale = self._value_scale()
        value, next_value = both[:n] * scale, both[n:] * scale
        done = torch.zeros_like(value) if self._ignore_done else data['done']
        traj_flag = data['traj_flag'].clone()
        traj_flag[-1] = True  # the batch end is a segment end for the recursion
        adv = gae(gae_data(value, next_value, data['reward'], done, traj_flag), self._gamma, self._gae_lambda)
        data['adv'] = adv
        data['value'] = value / scale
        self._set_return(data, value + adv)

    def _set_return(self, data: dict[str, Any], unnormalized_return: torch.Tensor) -> None:
        if self._running_mean_std is not None:
            data['return'] = unnormalized_return / self._running_mean_std.std
            self._running_mean_std.update(unnormalized_return.cpu().numpy())
        else:
            data['return'] = unnormalized_return

    def _forward_learn(self, data: Any) -> list[dict[str, Any]]:
        if isinstance(data, (list, tuple)):
            data = default_collate(list(data), collate_keys(data[0], self._learn_keys))
        else:
            data = dict(data)
        if self._cuda:
            data = {
                k: (
                    v.to(self._device)
                    if isinstance(v, torch.Tensor)
                    else {kk: vv.to(self._device) for kk, vv in v.items()}
                    if isinstance(v, dict)
                    else v
                )
                for k, v in data.items()
            }
        if self._mode_sensitive:
            self._model.train()
        data['value'] = data['value'].float()
        data['adv'] = data['adv'].float()
        if not self._recompute_adv:
            self._set_return(data, data['adv'] + data['value'] * self._value_scale())
        n = data['obs'].shape[0]
        continuous = self._action_space == 'continuous'
        stats: list[torch.Tensor] = []
        for _ in range(self._epoch_per_collect):
            if self._recompute_adv:
                self._recompute(data)
            for idx in minibatch_indices(n, self._batch_size, data['obs'].device):
                batch = index_batch(data, idx)
                out = self._model(batch['obs'], 'compute_actor_critic')
                adv = batch['adv']
                if self._adv_norm and adv.numel() > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                loss, info = ppo_error(
                    ppo_data(
                        out['logit'],
                        batch['logit'],
                        batch['action'],
                        out['value'],
                        batch['value'],
                        adv,
                        batch['return'],
                        batch.get('weight'),
                    ),
                    self._clip_ratio,
                    self._value_clip,
                    self._dual_clip,
                )
                total = (
                    loss.policy_loss + self._value_weight * loss.value_loss - self._entropy_weight * loss.entropy_loss
                )
                self._optimizer.zero_grad(set_to_none=True)
                # before clipping: every rank clips the same
                self.backward_and_sync_gradients(total, self._model, weight=idx.numel())
                if self._grad_clip_type == 'clip_norm':
                    torch.nn.utils.clip_grad_norm_(self._params, self._grad_clip_value)
                elif self._grad_clip_type == 'clip_value':
                    torch.nn.utils.clip_grad_value_(self._params, self._grad_clip_value)
                self._optimizer.step()
                row = [
                    total.detach(),
                    loss.policy_loss.detach(),
                    loss.value_loss.detach(),
                    loss.entropy_loss.detach(),
                    batch['adv'].max(),
                    batch['adv'].mean(),
                    out['value'].detach().mean(),
                    out['value'].detach().max(),
                    info.approx_kl,
                    info.clipfrac,
                ]
                if continuous:
                    row += [out['logit']['mu'].detach().mean(), out['logit']['sigma'].detach().mean()]
                stats.append(torch.stack(row))
        names = list(LOSS_STATS) + (list(CONTINUOUS_STATS) if continuous else [])
        # One log dict per optimizer step: the learner counts each as a training iteration (one sync here).
        lr = self._optimizer.param_groups[0]['lr']
        return [dict(zip(names, row), cur_lr=lr) for row in torch.stack(stats).tolist()]

    def _monitor_vars_learn(self) -> list[str]:
        names = ['cur_lr', *LOSS_STATS]
        return names + (list(CONTINUOUS_STATS) if self._action_space == 'continuous' else [])

    def _state_dict_learn(self) -> dict[str, Any]:
        state = {'model': self._model.state_dict(), 'optimizer': self._optimizer.state_dict()}
        if self._running_mean_std is not None:
            state['value_norm'] = self._running_mean_std.state_dict()
        return state

    def _load_state_dict_learn(self, state_dict: dict[str, Any]) -> None:
        self._model.load_state_dict(state_dict['model'])
        if 'optimizer' in state_dict:
            self._optimizer.load_state_dict(state_dict['optimizer'])
        if self._running_mean_std is not None and 'value_norm' in state_dict:
            self._running_mean_std.load_state_dict(state_dict['value_norm'])
