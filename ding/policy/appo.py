"""APPO: PPO's clipped surrogate on the lagged unrolls of the async pipeline, with V-trace or GAE targets."""

from __future__ import annotations

from typing import Any

import torch

from ding.rl_utils import ppo_policy_data, ppo_policy_error, vtrace_advantage, vtrace_targets
from ding.rl_utils.distribution import categorical_logp_entropy
from ding.rl_utils.vtrace import masked_mean
from ding.utils.registry import POLICY_REGISTRY

from .impala import IMPALA_LEARN_DEFAULTS, IMPALAPolicy

ADVANTAGE_TYPES = ('vtrace', 'gae')
APPO_STATS = (
    'total_loss',
    'policy_loss',
    'value_loss',
    'entropy_loss',
    'approx_kl',
    'clipfrac',
    'importance_ratio_mean',
    'value_mean',
    'grad_norm',
)


@POLICY_REGISTRY.register('appo')
class APPOPolicy(IMPALAPolicy):
    """Asynchronous PPO on the same model, protocol and batches as ``impala``.

    Each learner batch is trained on for ``learn.epoch_per_collect`` optimizer steps (whole batch each). The
    surrogate's ratio is ``pi(a) / mu(a)`` against the behaviour policy that collected the unroll, clipped to
    ``1 +- clip_ratio``. ``learn.advantage_type``:

    - ``'vtrace'``: value targets ``v_s`` are V-trace (``rho_clip_ratio`` / ``c_clip_ratio``), advantages
      ``r_s + gamma * v_{s+1} - V(x_s)`` (the surrogate's ratio makes the off-policy correction, so no extra
      ``rho_pg`` factor);
    - ``'gae'``: GAE(``lambda_``) advantages and ``V + A`` targets from the current critic, with no off-policy
      correction of the targets.

    Advantages are normalised over the batch's valid steps when ``adv_norm``. Value loss ``mean((v_s - V)^2)``.
    """

    config = dict(
        IMPALAPolicy.config,
        type='appo',
        learn=dict(
            IMPALA_LEARN_DEFAULTS,
            epoch_per_collect=1,
            clip_ratio=0.2,
            advantage_type='vtrace',
            adv_norm=True,
            lambda_=0.95,
        ),
    )

    def _init_learn(self) -> None:
        super()._init_learn()
        lcfg = self._cfg.learn
        if lcfg.advantage_type not in ADVANTAGE_TYPES:
            raise ValueError(
                f'policy.learn.advantage_type must be one of {ADVANTAGE_TYPES}, got {lcfg.advantage_type!r}'
            )
        self._advantage_type = lcfg.advantage_type
        self._epoch_per_collect = int(lcfg.epoch_per_collect)
        if self._epoch_per_collect < 1:
            raise ValueError(f'policy.learn.epoch_per_collect must be >= 1, got {lcfg.epoch_per_collect!r}')
        self._clip_ratio = float(lcfg.clip_ratio)
        self._adv_norm = bool(lcfg.adv_norm)

    def _forward_learn(self, data: Any) -> list[dict[str, Any]]:  # type: ignore[override]
        batch = self._prepare_batch(data)
        if self._mode_sensitive:
            self._model.train()
        # One log dict per optimizer step: the learner counts each as a training iteration.
        return [self._train_step(batch) for _ in range(self._epoch_per_collect)]

    def _targets(self, batch: dict[str, Any], log_rhos: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(value targets, advantages)``, both ``[T, B]``, no gradient."""
        done, truncated, mask, reward = batch['done'], batch['truncated'], batch['mask'], batch['reward']
        if self._advantage_type == 'gae':
            # V-trace with every ratio 1 is TD(lambda): its targets minus V are the GAE(lambda) advantages.
            return_, _ = vtrace_targets(
                torch.zeros_like(log_rhos),
                reward,
                value,
                self._gamma,
                self._lambda,
                1.0,
                1.0,
                1.0,
                done,
                truncated,
                mask,
            )
            return return_, (return_ - value[:-1]) * mask
        return_, _ = vtrace_targets(
            log_rhos, reward, value, self._gamma, self._lambda, self._rho_clip_ratio, self._c_clip_ratio, 1.0,
            done, truncated, mask,
        )  # fmt: skip
        gammas = self._gamma * (~done.bool()).to(reward.dtype)
        return return_, vtrace_advantage(mask, reward, return_, value, gammas)

    def _loss(
        self, batch: dict[str, Any], target_logit: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        mask = batch['mask']
        with torch.no_grad():
            logp, _ = categorical_logp_entropy(target_logit, batch['action'])
            behaviour_logp, _ = categorical_logp_entropy(batch['logit'], batch['action'])
            return_, adv = self._targets(batch, logp - behaviour_logp, value.detach())
            if self._adv_norm:
                valid = mask.sum().clamp(min=1.0)
                mean = (adv * mask).sum() / valid
                std = (((adv - mean) * mask).pow(2).sum() / valid).sqrt()
                adv = (adv - mean) / (std + 1e-8) * mask
            # ppo_policy_error takes a plain mean: weights rescaled so that it averages over valid steps only
            weight = mask * (mask.numel() / mask.sum().clamp(min=1.0))
        n_actions = target_logit.shape[-1]
        policy, info = ppo_policy_error(
            ppo_policy_data(
                target_logit.reshape(-1, n_actions),
                batch['logit'].reshape(-1, n_actions),
                batch['action'].reshape(-1),
                adv.reshape(-1),
                weight.reshape(-1),
            ),
            self._clip_ratio,
        )
        value_loss = masked_mean((return_ - value[:-1]).pow(2), None, mask)
        total = policy.policy_loss + self._value_weight * value_loss - self._entropy_weight * policy.entropy_loss
        terms = [policy.policy_loss, value_loss, policy.entropy_loss, info.approx_kl, info.clipfrac]
        return total, [t.detach() for t in terms]

    def _stat_names(self) -> tuple[str, ...]:
        return APPO_STATS
