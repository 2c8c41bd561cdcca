"""PPO losses: clipped surrogate policy loss (optionally dual-clipped), clipped value loss and entropy."""

from __future__ import annotations

from collections import namedtuple

import torch

from .distribution import logp_entropy

ppo_data = namedtuple(
    'ppo_data', ['logit_new', 'logit_old', 'action', 'value_new', 'value_old', 'adv', 'return_', 'weight']
)
ppo_policy_data = namedtuple('ppo_policy_data', ['logit_new', 'logit_old', 'action', 'adv', 'weight'])
ppo_value_data = namedtuple('ppo_value_data', ['value_new', 'value_old', 'return_', 'weight'])
ppo_loss = namedtuple('ppo_loss', ['policy_loss', 'value_loss', 'entropy_loss'])
ppo_policy_loss = namedtuple('ppo_policy_loss', ['policy_loss', 'entropy_loss'])
ppo_info = namedtuple('ppo_info', ['approx_kl', 'clipfrac'])


def _wmean(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    return x.mean() if weight is None else (x * weight).mean()


def ppo_policy_error(
    data: ppo_policy_data, clip_ratio: float = 0.2, dual_clip: float | None = None
) -> tuple[ppo_policy_loss, ppo_info]:
    """``-mean(min(r A, clip(r, 1-eps, 1+eps) A))`` with ``r = pi_new(a) / pi_old(a)``.

    ``logit_*`` are (B, A) logits (discrete) or ``{'mu', 'sigma'}`` dicts (continuous). ``dual_clip`` (> 1) also
    bounds the loss of negative-advantage samples by ``-dual_clip * A``. ``ppo_info`` holds detached tensors.
    """
    logit_new, logit_old, action, adv, weight = data
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f'ppo: dual_clip must be > 1.0, got {dual_clip}')
    logp_new, entropy = logp_entropy(logit_new, action)
    with torch.no_grad():
        logp_old, _ = logp_entropy(logit_old, action)
    ratio = torch.exp(logp_new - logp_old)
    surr1 = ratio * adv
    surr2 = ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio) * adv
    clipped = torch.min(surr1, surr2)
    if dual_clip is not None:
        clipped = torch.where(adv < 0, torch.max(clipped, dual_clip * adv), clipped)
    policy_loss = -_wmean(clipped, weight)
    entropy_loss = _wmean(entropy, weight)
    with torch.no_grad():
        approx_kl = (logp_old - logp_new).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_ratio).float().mean()
    return ppo_policy_loss(policy_loss, entropy_loss), ppo_info(approx_kl, clipfrac)


def ppo_value_error(data: ppo_value_data, clip_ratio: float = 0.2, use_value_clip: bool = True) -> torch.Tensor:
    """``0.5 * mean(max((R - V)^2, (R - V_clip)^2))`` with ``V_clip = V_old + clip(V - V_old, -eps, eps)``;
    without clipping ``0.5 * mean((R - V)^2)``."""
    value_new, value_old, return_, weight = data
    err = (return_ - value_new).pow(2)
    if use_value_clip:
        value_clip = value_old + (value_new - value_old).clamp(-clip_ratio, clip_ratio)
        err = torch.max(err, (return_ - value_clip).pow(2))
    return 0.5 * _wmean(err, weight)


def ppo_error(
    data: ppo_data, clip_ratio: float = 0.2, use_value_clip: bool = True, dual_clip: float | None = None
) -> tuple[ppo_loss, ppo_info]:
    """PPO policy, value and entropy terms. The caller combines them as
    ``policy_loss + value_weight * value_loss - entropy_weight * entropy_loss``."""
    logit_new, logit_old, action, value_new, value_old, adv, return_, weight = data
    p_loss, info = ppo_policy_error(ppo_policy_data(logit_new, logit_old, action, adv, weight), clip_ratio, dual_clip)
    v_loss = ppo_value_error(ppo_value_data(value_new, value_old, return_, weight), clip_ratio, use_value_clip)
    return ppo_loss(p_loss.policy_loss, v_loss, p_loss.entropy_loss), info


# The continuous variant is the same maths: ``logp_entropy`` dispatches on the ``{'mu', 'sigma'}`` dict.
ppo_error_continuous = ppo_error
