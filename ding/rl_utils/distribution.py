"""Log-probabilities and entropies of the two policy distributions the actor-critic losses need.

Written directly (not via ``torch.distributions``) because object construction and argument validation there
cost more than the maths on CartPole-sized batches.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def categorical_logp_entropy(logit: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log pi(action), entropy)`` of ``Categorical(logits=logit)``; logit (B, A), action (B,) -> (B,), (B,)."""
    logp_all = F.log_softmax(logit, dim=-1)
    logp = logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def gaussian_logp_entropy(
    mu: torch.Tensor, sigma: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log pi(action), entropy)`` of a diagonal Gaussian, summed over the last (action) dimension."""
    if action.dim() == mu.dim() - 1:  # (B,) actions for a 1-D action space
        action = action.unsqueeze(-1)
    log_sigma = sigma.log()
    logp = (-0.5 * ((action - mu) / sigma).pow(2) - log_sigma - _HALF_LOG_2PI).sum(-1)
    entropy = (0.5 + _HALF_LOG_2PI + log_sigma).sum(-1)
    return logp, entropy


def logp_entropy(logit, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dispatch on the policy output: a logit tensor (discrete) or a ``{'mu', 'sigma'}`` dict (continuous)."""
    if isinstance(logit, dict):
        return gaussian_logp_entropy(logit['mu'], logit['sigma'], action)
    return categorical_logp_entropy(logit, action)
