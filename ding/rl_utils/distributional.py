"""Distributional Q-learning losses: C51's projected categorical target and QR-DQN's quantile Huber loss.

Shapes follow ``td.py``: ``action`` / ``next_n_action`` (B,), ``reward`` (nstep, B) (or (B,) when ``nstep == 1``),
``done`` (B,) (True only for a real termination), ``weight`` (B,) or None, ``value_gamma`` (B,) or None
(``gamma ** nstep``).
"""

from __future__ import annotations

from collections import namedtuple

import torch

from .td import _time_major_reward, _weighted_mean

dist_nstep_td_data = namedtuple(
    'dist_nstep_td_data', ['dist', 'next_n_dist', 'act', 'next_n_act', 'reward', 'done', 'weight']
)
qrdqn_nstep_td_data = namedtuple(
    'qrdqn_nstep_td_data', ['q', 'next_n_q', 'action', 'next_n_action', 'reward', 'done', 'tau', 'weight']
)


def _discounted_return(
    reward: torch.Tensor, done: torch.Tensor, gamma: float, nstep: int, value_gamma: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum_k gamma^k r_k, bootstrap factor value_gamma * (1 - done))``, both (B,)."""
    reward = _time_major_reward(reward, nstep)
    discounts = gamma ** torch.arange(nstep, dtype=reward.dtype, device=reward.device)
    ret = (discounts.unsqueeze(1) * reward).sum(0)
    if value_gamma is None:
        value_gamma = torch.full_like(ret, gamma**nstep)
    return ret, value_gamma.to(ret.dtype) * (1.0 - done.to(ret.dtype))


def _pick_action(x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """(B, A, K) -> (B, K): each sample's row for its action."""
    index = action.long().reshape(-1, 1, 1).expand(-1, 1, x.shape[-1])
    return x.gather(1, index).squeeze(1)


def dist_nstep_td_error(
    data: dist_nstep_td_data,
    gamma: float,
    v_min: float,
    v_max: float,
    n_atom: int,
    nstep: int = 1,
    value_gamma: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """C51 loss: cross-entropy between ``dist(s, a)`` and the n-step target distribution projected on the support.

    ``dist`` / ``next_n_dist``: (B, A, n_atom) probabilities over the atoms ``linspace(v_min, v_max, n_atom)``.
    Each target atom ``R + value_gamma * (1 - done) * z_j`` (clipped to the support) splits its probability
    between its two neighbouring atoms in proportion to closeness. Returns ``(weighted mean loss, per-sample
    loss (B,))``.
    """
    if n_atom < 2 or not v_min < v_max:
        raise ValueError(f'dist_nstep_td_error: need n_atom >= 2 and v_min < v_max, got {n_atom}, {v_min}, {v_max}')
    dist, next_n_dist, act, next_n_act, reward, done, weight = data
    if dist.shape[-1] != n_atom:
        raise ValueError(f'dist_nstep_td_error: dist has {dist.shape[-1]} atoms, n_atom={n_atom}')
    ret, bootstrap = _discounted_return(reward, done, gamma, nstep, value_gamma)
    support = torch.linspace(v_min, v_max, n_atom, dtype=dist.dtype, device=dist.device)
    delta_z = (v_max - v_min) / (n_atom - 1)
    with torch.no_grad():
        next_prob = _pick_action(next_n_dist, next_n_act)  # (B, n_atom)
        target_z = (ret.unsqueeze(1) + bootstrap.unsqueeze(1) * support.unsqueeze(0)).clamp(v_min, v_max)
        b = (target_z - v_min) / delta_z  # fractional atom index in [0, n_atom - 1]
        lower, upper = b.floor().long(), b.ceil().long()
        # An atom that lands exactly on the grid (lower == upper) gives all its mass to that atom.
        lower_share = upper.to(b.dtype) - b + (lower == upper).to(b.dtype)
        upper_share = b - lower.to(b.dtype)
        projected = torch.zeros_like(next_prob)
        projected.scatter_add_(1, lower, next_prob * lower_share)
        projected.scatter_add_(1, upper, next_prob * upper_share)
    log_prob = _pick_action(dist, act).clamp_min(1e-8).log()
    per_sample = -(projected * log_prob).sum(-1)
    return _weighted_mean(per_sample, weight), per_sample


def quantile_huber(u: torch.Tensor, tau: torch.Tensor, kappa: float) -> torch.Tensor:
    """``|tau - 1{u < 0}| * Huber_kappa(u) / kappa`` elementwise (``kappa = 0``: the plain quantile loss
    ``|tau - 1{u < 0}| * |u|``)."""
    if kappa < 0:
        raise ValueError(f'quantile_huber: kappa must be >= 0, got {kappa}')
    abs_u = u.abs()
    if kappa == 0:
        huber = abs_u
    else:
        huber = torch.where(abs_u <= kappa, 0.5 * u.pow(2), kappa * (abs_u - 0.5 * kappa)) / kappa
    return (tau - (u.detach() < 0).to(u.dtype)).abs() * huber


def qrdqn_nstep_td_error(
    data: qrdqn_nstep_td_data,
    gamma: float,
    nstep: int = 1,
    value_gamma: torch.Tensor | None = None,
    kappa: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """QR-DQN loss: quantile Huber loss between ``q(s, a)`` and the n-step target quantiles.

    ``q`` / ``next_n_q``: (B, A, N) quantile values; ``tau``: (B, N, 1) (or (N,)) the quantile fractions
    ``q`` estimates. Per sample the loss sums over the predicted quantiles ``i`` and averages over the target
    quantiles ``j`` of ``quantile_huber(T_j - q_i, tau_i, kappa)``. Returns ``(weighted mean loss, per-sample
    loss (B,))``.
    """
    q, next_n_q, action, next_n_action, reward, done, tau, weight = data
    ret, bootstrap = _discounted_return(reward, done, gamma, nstep, value_gamma)
    with torch.no_grad():
        target = ret.unsqueeze(1) + bootstrap.unsqueeze(1) * _pick_action(next_n_q, next_n_action)  # (B, N)
    pred = _pick_action(q, action)  # (B, N)
    tau = tau.reshape(-1, pred.shape[1], 1) if tau.dim() > 1 else tau.reshape(1, -1, 1)
    u = target.unsqueeze(1) - pred.unsqueeze(2)  # (B, N_pred, N_target)
    per_sample = quantile_huber(u, tau.to(pred.dtype), kappa).mean(2).sum(1)
    return _weighted_mean(per_sample, weight), per_sample
