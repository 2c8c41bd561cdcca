"""Pieces of the continuous-action actor-critics (SAC, TD3): tanh-Gaussian sampling, twin-critic targets and
losses, TD3's target policy smoothing.

Actions live in [-1, 1] (the env scales them, e.g. Pendulum's ``act_scale``). ``reward`` / ``done`` are (B,);
``done`` is True only for a real termination (a time-limit truncation bootstraps).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)


def tanh_gaussian_sample(mu: torch.Tensor, sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised draw ``a = tanh(mu + sigma * eps)`` and its log-density (B,), summed over action dims.

    The density accounts for the squashing: ``log N(u; mu, sigma) - sum log(1 - tanh(u)^2)``, the latter written
    as ``2 * (log 2 - u - softplus(-2u))``, which stays finite where ``tanh(u)`` rounds to +-1.
    """
    eps = torch.randn_like(mu)
    u = mu + sigma * eps
    gaussian = (-0.5 * eps.pow(2) - sigma.log() - _HALF_LOG_2PI).sum(-1)
    squash = (2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))).sum(-1)
    return torch.tanh(u), gaussian - squash


def twin_q_target(
    next_q: list[torch.Tensor],
    reward: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    next_log_prob: torch.Tensor | None = None,
    alpha: float | torch.Tensor = 0.0,
) -> torch.Tensor:
    """``r + gamma * (1 - done) * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))`` (no gradient).

    ``next_q``: one critic's or both twins' values at the next action; the minimum is the clipped double-Q
    estimate. ``next_log_prob`` and ``alpha`` add SAC's entropy bonus (TD3 passes neither).
    """
    with torch.no_grad():
        next_value = torch.stack(list(next_q)).min(0).values
        if next_log_prob is not None:
            next_value = next_value - alpha * next_log_prob
        return reward + gamma * (1.0 - done.to(reward.dtype)) * next_value


def twin_q_loss(
    q_values: list[torch.Tensor], target: torch.Tensor, weight: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum over the critics of ``mean(weight * (Q_i(s, a) - target)^2)``; also the per-sample TD error of the
    first critic ``target - Q_1`` (B,) (for priorities)."""
    loss = torch.zeros((), dtype=target.dtype, device=target.device)
    for q in q_values:
        sq = (q - target).pow(2)
        loss = loss + (sq.mean() if weight is None else (sq * weight).mean())
    return loss, (target - q_values[0]).detach()


def smooth_target_action(action: torch.Tensor, noise_sigma: float, noise_min: float, noise_max: float) -> torch.Tensor:
    """TD3's target policy smoothing: ``clip(action + clip(N(0, noise_sigma), noise_min, noise_max), -1, 1)``."""
    noise = (torch.randn_like(action) * noise_sigma).clamp(noise_min, noise_max)
    return (action + noise).clamp(-1.0, 1.0)
