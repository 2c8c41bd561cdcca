"""Temporal-difference targets and losses for Q learning (1-step and n-step) and state values.

Shapes follow DI-engine: ``q`` / ``next_n_q`` (B, A); ``action`` / ``next_n_action`` (B,); ``reward`` (nstep, B)
(a (B,) reward is accepted when ``nstep == 1``); ``done`` (B,); ``weight`` (B,) or None.
``done`` must be True only for real terminations: a time-limit truncation bootstraps like an unfinished episode.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable

import torch
import torch.nn as nn

from .value_rescale import value_inv_transform, value_transform

q_1step_td_data = namedtuple('q_1step_td_data', ['q', 'next_q', 'act', 'next_act', 'reward', 'done', 'weight'])
nstep_return_data = namedtuple('nstep_return_data', ['reward', 'next_value', 'done'])
q_nstep_td_data = namedtuple(
    'q_nstep_td_data', ['q', 'next_n_q', 'action', 'next_n_action', 'reward', 'done', 'weight']
)
v_1step_td_data = namedtuple('v_1step_td_data', ['v', 'next_v', 'reward', 'done', 'weight'])

_mse = nn.MSELoss(reduction='none')


def _weighted_mean(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    return x.mean() if weight is None else (x * weight).mean()


def _time_major_reward(reward: torch.Tensor, nstep: int) -> torch.Tensor:
    if reward.dim() == 1:
        if nstep != 1:
            raise ValueError(
                f'td: reward of shape {tuple(reward.shape)} is one step, but nstep={nstep}; pass (nstep, B) rewards'
            )
        return reward.unsqueeze(0)
    if reward.shape[0] != nstep:
        raise ValueError(f'td: reward must be (nstep={nstep}, B), got {tuple(reward.shape)}')
    return reward


def nstep_return(
    data: nstep_return_data, gamma: float, nstep: int, value_gamma: float | torch.Tensor | None = None
) -> torch.Tensor:
    """``sum_{i<n} gamma^i r_i + value_gamma * (1 - done) * next_value`` with ``value_gamma = gamma^n`` by default.

    A per-sample ``value_gamma`` (B,) handles samples whose n-step window was cut short by the end of a
    trajectory (``gamma^k`` for the k real steps; the missing rewards are zeros).
    """
    reward, next_value, done = data
    reward = _time_major_reward(reward, nstep)
    if nstep == 1:
        ret = reward[0]
    else:
        discounts = gamma ** torch.arange(nstep, dtype=reward.dtype, device=reward.device)
        ret = (discounts.unsqueeze(1) * reward).sum(0)
    if value_gamma is None:
        value_gamma = gamma**nstep
    return ret + value_gamma * (1.0 - done.to(ret.dtype)) * next_value


def q_nstep_td_target(
    data: q_nstep_td_data,
    gamma: float,
    nstep: int = 1,
    cum_reward: bool = False,
    value_gamma: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Q(s, a), n-step target)``, the target built from ``next_n_q`` at ``next_n_action`` (no gradient).

    ``cum_reward=True``: ``reward`` is already the discounted n-step sum, shape (B,).
    """
    q, next_n_q, action, next_n_action, reward, done, _ = data
    q_s_a = q.gather(1, action.long().reshape(-1, 1)).squeeze(1)
    next_q_s_a = next_n_q.detach().gather(1, next_n_action.long().reshape(-1, 1)).squeeze(1)
    done = done.to(q_s_a.dtype)
    if cum_reward:
        vg = gamma**nstep if value_gamma is None else value_gamma
        target = reward + vg * (1.0 - done) * next_q_s_a
    else:
        target = nstep_return(nstep_return_data(reward, next_q_s_a, done), gamma, nstep, value_gamma)
    return q_s_a, target.detach()


def q_nstep_td_error(
    data: q_nstep_td_data,
    gamma: float,
    nstep: int = 1,
    cum_reward: bool = False,
    value_gamma: torch.Tensor | None = None,
    criterion: nn.Module = _mse,
) -> tuple[torch.Tensor, torch.Tensor]:
    """n-step Q-learning loss: ``(mean(weight * criterion(Q(s,a), target)), per-sample criterion values)``."""
    q_s_a, target = q_nstep_td_target(data, gamma, nstep, cum_reward, value_gamma)
    per_sample = criterion(q_s_a, target)
    return _weighted_mean(per_sample, data.weight), per_sample


def q_nstep_td_error_with_rescale(
    data: q_nstep_td_data,
    gamma: float,
    nstep: int = 1,
    value_gamma: torch.Tensor | None = None,
    criterion: nn.Module = _mse,
    trans_fn: Callable[[torch.Tensor], torch.Tensor] = value_transform,
    inv_trans_fn: Callable[[torch.Tensor], torch.Tensor] = value_inv_transform,
) -> tuple[torch.Tensor, torch.Tensor]:
    """n-step Q-learning on rescaled values (R2D2): the target is ``h(sum_i gamma^i r_i + value_gamma (1-done)
    h^-1(Q'(s_n, a_n)))``, the network's Q values live in ``h``'s space.

    Returns ``(mean(weight * criterion(Q(s,a), target)), per-sample TD errors target - Q(s,a))``: the errors
    (signed, detached) are what prioritised replay turns into priorities.
    """
    q, next_n_q, action, next_n_action, reward, done, weight = data
    q_s_a = q.gather(1, action.long().reshape(-1, 1)).squeeze(1)
    next_q_s_a = next_n_q.detach().gather(1, next_n_action.long().reshape(-1, 1)).squeeze(1)
    ret = nstep_return(nstep_return_data(reward, inv_trans_fn(next_q_s_a), done), gamma, nstep, value_gamma)
    target = trans_fn(ret).detach()
    loss = _weighted_mean(criterion(q_s_a, target), weight)
    return loss, (target - q_s_a).detach()


def q_1step_td_error(data: q_1step_td_data, gamma: float, criterion: nn.Module = _mse) -> torch.Tensor:
    """One-step Q-learning loss ``mean(weight * criterion(Q(s,a), r + gamma (1-done) Q'(s', a')))``."""
    q, next_q, act, next_act, reward, done, weight = data
    loss, _ = q_nstep_td_error(
        q_nstep_td_data(q, next_q, act, next_act, reward, done, weight), gamma, 1, criterion=criterion
    )
    return loss


def v_1step_td_error(data: v_1step_td_data, gamma: float, criterion: nn.Module = _mse) -> torch.Tensor:
    """State-value TD(0) loss ``mean(weight * criterion(V(s), r + gamma (1-done) V(s')))``."""
    v, next_v, reward, done, weight = data
    target = reward + gamma * (1.0 - done.to(v.dtype)) * next_v.detach()
    return _weighted_mean(criterion(v, target.detach()), weight)
