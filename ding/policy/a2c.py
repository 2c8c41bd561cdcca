"""Synchronous advantage actor-critic (A2C) on a VAC model."""

from __future__ import annotations

from typing import Any

import torch

from ding.rl_utils import a2c_data, a2c_error
from ding.utils.collate import default_collate
from ding.utils.registry import POLICY_REGISTRY

from .common_utils import build_adam
from .onpolicy_common import OnPolicyActorCriticBase, collate_keys, index_batch, minibatch_indices


@POLICY_REGISTRY.register('a2c')
class A2CPolicy(OnPolicyActorCriticBase):
    """A2C: one pass of shuffled minibatches (``learn.batch_size``) over each collected batch.

    Advantages are GAE over each trajectory (``collect.gae_lambda``: 1.0 gives Monte-Carlo returns bootstrapped
    at cut segments, 0.0 one-step TD); value targets are ``value + adv``. Loss:
    ``-mean(log pi(a) A) + value_weight * mean((R - V)^2) - entropy_weight * mean(H)``; gradients are clipped
    to norm ``learn.grad_norm``.
    """

    config = dict(
        type='a2c',
        cuda=False,
        on_policy=True,
        priority=False,
        priority_IS_weight=False,
        action_space='discrete',
        model=dict(),
        learn=dict(
            batch_size=64,
            learning_rate=0.001,
            betas=(0.9, 0.999),
            eps=1e-8,
            grad_norm=0.5,
            value_weight=0.5,
            entropy_weight=0.01,
            adv_norm=True,
            ignore_done=False,
        ),
        collect=dict(unroll_len=1, discount_factor=0.9, gae_lambda=0.95),
        eval=dict(),
        other=dict(),
    )

    def _init_learn(self) -> None:
        cfg, lcfg = self._cfg, self._cfg.learn
        if cfg.priority or cfg.priority_IS_weight:
            raise ValueError('A2CPolicy: priority / priority_IS_weight are not supported (on-policy data)')
        self._optimizer = build_adam(
            self._model.parameters(),
            lcfg.learning_rate,
            betas=tuple(lcfg.get('betas', (0.9, 0.999))),
            eps=float(lcfg.get('eps', 1e-8)),
        )
        self._batch_size = int(lcfg.batch_size)
        self._value_weight = float(lcfg.value_weight)
        self._entropy_weight = float(lcfg.entropy_weight)
        self._adv_norm = bool(lcfg.adv_norm)
        self._grad_norm = lcfg.get('grad_norm', None)
        self._params = [p for p in self._model.parameters() if p.requires_grad]
        self._learn_keys = ['obs', 'action', 'value', 'adv']
        self._model.train()

    def _forward_learn(self, data: Any) -> list[dict[str, Any]]:
        if isinstance(data, (list, tuple)):
            data = default_collate(list(data), collate_keys(data[0], self._learn_keys))
        else:
            data = dict(data)
        if self._cuda:
            data = {k: (v.to(self._device) if isinstance(v, torch.Tensor) else v) for k, v in data.items()}
        if self._mode_sensitive:
            self._model.train()
        data['adv'] = data['adv'].float()
        data['return'] = data['value'].float() + data['adv']
        stats: list[torch.Tensor] = []
        for idx in minibatch_indices(data['obs'].shape[0], self._batch_size, data['obs'].device):
            batch = index_batch(data, idx)
            out = self._model(batch['obs'], 'compute_actor_critic')
            adv = batch['adv']
            if self._adv_norm and adv.numel() > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            loss = a2c_error(
                a2c_data(out['logit'], batch['action'], out['value'], adv, batch['return'], batch.get('weight'))
            )
            total = loss.policy_loss + self._value_weight * loss.value_loss - self._entropy_weight * loss.entropy_loss
            self._optimizer.zero_grad(set_to_none=True)
            # before clipping: every rank clips the same
            self.backward_and_sync_gradients(total, self._model, weight=idx.numel())
            if self._grad_norm:
                grad_norm = torch.nn.utils.clip_grad_norm_(self._params, self._grad_norm)
            else:
                grad_norm = torch.zeros(())
            self._optimizer.step()
            stats.append(
                torch.stack(
                    [
                        total.detach(),
                        loss.policy_loss.detach(),
                        loss.value_loss.detach(),
                        loss.entropy_loss.detach(),
                        batch['adv'].abs().max(),
                        grad_norm.detach(),
                    ]
                )
            )
        names = ['total_loss', 'policy_loss', 'value_loss', 'entropy_loss', 'adv_abs_max', 'grad_norm']
        # One log dict per optimizer step: the learner counts each as a training iteration (one sync here).
        lr = self._optimizer.param_groups[0]['lr']
        return [dict(zip(names, row), cur_lr=lr) for row in torch.stack(stats).tolist()]

    def _monitor_vars_learn(self) -> list[str]:
        return ['cur_lr', 'total_loss', 'policy_loss', 'value_loss', 'entropy_loss', 'adv_abs_max', 'grad_norm']
