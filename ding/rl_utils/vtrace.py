"""V-trace off-policy corrected targets and the IMPALA actor-critic loss (Espeholt et al. 2018).

Everything is time-major: ``[T, B]`` per step, ``[T + 1, B]`` for values (the last row is the bootstrap value
of the observation after the unroll). Episode boundaries inside an unroll, in the async trajectory layout
(``ding.worker.async_actor.protocol``):

- ``done[t]``: the episode terminated at step ``t``: no bootstrap beyond it (discount 0).
- ``truncated[t]``: a time limit cut the episode at step ``t``: bootstrap from ``V(x[t+1])`` but carry no trace
  past it.
- ``mask[t] == 0``: a reset step, no transition: no correction, ``v_t = V(x_t)``, no loss.
"""

from __future__ import annotations

from collections import namedtuple

import torch

from .distribution import logp_entropy
from .scan import reverse_scan

vtrace_data = namedtuple(
    'vtrace_data',
    ['target_output', 'behaviour_output', 'action', 'value', 'reward', 'weight', 'done', 'truncated', 'mask'],
    defaults=(None, None, None),
)
vtrace_data.__doc__ = """Inputs of ``vtrace_error_*``.

``target_output`` / ``behaviour_output``: logits ``[T, B, A]`` (or ``{'mu', 'sigma'}`` dicts of ``[T, B, A]``) of
the learner's and of the acting policy; ``action`` ``[T, B]`` (``[T, B, A]`` continuous); ``value`` ``[T + 1, B]``
(learner critic, gradients flow); ``reward`` ``[T, B]``; ``weight`` ``[T, B]`` or None (loss weights); ``done``,
``truncated`` ``[T, B]`` bool or None; ``mask`` ``[T, B]`` float or None (0 at reset steps).
"""
vtrace_loss = namedtuple('vtrace_loss', ['policy_loss', 'value_loss', 'entropy_loss'])


def _discounts(gammas: float | torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
    if isinstance(gammas, torch.Tensor):
        if gammas.shape != reward.shape:
            raise ValueError(f'vtrace: gammas must have the reward shape {tuple(reward.shape)}, got {gammas.shape}')
        return gammas.to(reward.dtype)
    return torch.full_like(reward, float(gammas))


def _check_shapes(reward: torch.Tensor, bootstrap_values: torch.Tensor, **per_step: torch.Tensor) -> None:
    if bootstrap_values.shape != (reward.shape[0] + 1, *reward.shape[1:]):
        raise ValueError(
            f'vtrace: bootstrap_values must be [T + 1, ...] for reward {tuple(reward.shape)}, '
            f'got {tuple(bootstrap_values.shape)}'
        )
    for name, x in per_step.items():
        if x.shape != reward.shape:
            raise ValueError(f'vtrace: {name} must have the reward shape {tuple(reward.shape)}, got {tuple(x.shape)}')


def vtrace_nstep_return(
    clipped_rhos: torch.Tensor,
    clipped_cs: torch.Tensor,
    reward: torch.Tensor,
    bootstrap_values: torch.Tensor,
    gammas: float | torch.Tensor = 0.99,
    lambda_: float = 0.95,
) -> torch.Tensor:
    """V-trace targets ``v_s`` ``[T, B]`` by the backward recursion

    ``v_s - V(x_s) = delta_s + gamma_s * lambda * c_s * (v_{s+1} - V(x_{s+1}))``,
    ``delta_s = rho_s * (r_s + gamma_s * V(x_{s+1}) - V(x_s))``, with ``v_T = V(x_T)``.

    ``clipped_rhos`` / ``clipped_cs`` are the truncated importance ratios ``min(rho_bar, pi/mu)`` and
    ``min(c_bar, pi/mu)`` (zero at steps that carry no transition); ``gammas`` a float or a ``[T, B]`` tensor of
    per-step discounts (zero where an episode terminated). No gradient flows through the result.
    """
    _check_shapes(reward, bootstrap_values, clipped_rhos=clipped_rhos, clipped_cs=clipped_cs)
    with torch.no_grad():
        discounts = _discounts(gammas, reward)
        values = bootstrap_values.to(reward.dtype)
        deltas = clipped_rhos * (reward + discounts * values[1:] - values[:-1])
        trace = discounts * lambda_ * clipped_cs
        return values[:-1] + reverse_scan(deltas, trace)


def vtrace_advantage(
    clipped_pg_rhos: torch.Tensor,
    reward: torch.Tensor,
    return_: torch.Tensor,
    bootstrap_values: torch.Tensor,
    gammas: float | torch.Tensor = 0.99,
) -> torch.Tensor:
    """Policy-gradient advantages ``rho_pg_s * (r_s + gamma_s * v_{s+1} - V(x_s))`` ``[T, B]``.

    ``return_`` is ``[T, B]`` V-trace targets (``v_{T}`` is taken from ``bootstrap_values[T]``) or already
    ``[T + 1, B]`` with the bootstrap row appended.
    """
    _check_shapes(reward, bootstrap_values, clipped_pg_rhos=clipped_pg_rhos)
    with torch.no_grad():
        values = bootstrap_values.to(reward.dtype)
        if return_.shape[0] == reward.shape[0]:
            return_ = torch.cat([return_, values[-1:]], dim=0)
        return clipped_pg_rhos * (reward + _discounts(gammas, reward) * return_[1:] - values[:-1])


def vtrace_targets(
    log_rhos: torch.Tensor,
    reward: torch.Tensor,
    bootstrap_values: torch.Tensor,
    gamma: float = 0.99,
    lambda_: float = 0.95,
    rho_clip_ratio: float = 1.0,
    c_clip_ratio: float = 1.0,
    rho_pg_clip_ratio: float = 1.0,
    done: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v_s, pg_advantage)``, both ``[T, B]``, from log importance ratios ``log(pi(a_s) / mu(a_s))``, applying the
    protocol's ``done`` / ``truncated`` / ``mask`` (see the module docstring)."""
    with torch.no_grad():
        rhos = log_rhos.detach().exp()
        valid = torch.ones_like(rhos) if mask is None else mask.to(rhos.dtype)
        clipped_rhos = rhos.clamp(max=rho_clip_ratio) * valid
        clipped_cs = rhos.clamp(max=c_clip_ratio) * valid
        if truncated is not None:
            clipped_cs = clipped_cs * (~truncated.bool()).to(rhos.dtype)
        gammas = torch.full_like(rhos, gamma)
        if done is not None:
            gammas = gammas * (~done.bool()).to(rhos.dtype)
        values = bootstrap_values.detach()
        return_ = vtrace_nstep_return(clipped_rhos, clipped_cs, reward, values, gammas, lambda_)
        adv = vtrace_advantage(rhos.clamp(max=rho_pg_clip_ratio) * valid, reward, return_, values, gammas)
        return return_, adv


def masked_mean(x: torch.Tensor, weight: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x * weight`` over the steps ``mask`` keeps (all steps without a mask)."""
    if weight is not None:
        x = x * weight
    if mask is None:
        return x.mean()
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def vtrace_error_discrete_action(
    data: vtrace_data,
    gamma: float = 0.99,
    lambda_: float = 0.95,
    rho_clip_ratio: float = 1.0,
    c_clip_ratio: float = 1.0,
    rho_pg_clip_ratio: float = 1.0,
) -> vtrace_loss:
    """IMPALA loss terms on one batch of unrolls.

    ``policy_loss = -mean(log pi(a_s) * A_s)`` with the V-trace advantage ``A_s``, ``value_loss =
    mean((v_s - V(x_s))^2)``, ``entropy_loss = mean(H(pi(x_s)))``; means over the steps ``mask`` keeps, each step
    weighted by ``weight``. The caller combines them as
    ``policy_loss + value_weight * value_loss - entropy_weight * entropy_loss``.
    """
    target_output, behaviour_output, action, value, reward, weight, done, truncated, mask = data
    logp, entropy = logp_entropy(target_output, action)
    with torch.no_grad():
        behaviour_logp, _ = logp_entropy(behaviour_output, action)
    return_, adv = vtrace_targets(
        logp.detach() - behaviour_logp,
        reward,
        value,
        gamma,
        lambda_,
        rho_clip_ratio,
        c_clip_ratio,
        rho_pg_clip_ratio,
        done,
        truncated,
        mask,
    )
    policy_loss = -masked_mean(logp * adv, weight, mask)
    value_loss = masked_mean((return_ - value[:-1]).pow(2), weight, mask)
    entropy_loss = masked_mean(entropy, weight, mask)
    return vtrace_loss(policy_loss, value_loss, entropy_loss)


# The continuous variant is the same maths: ``logp_entropy`` dispatches on a ``{'mu', 'sigma'}`` policy output
# (``action`` then ``[T, B, A]``).
vtrace_error_continuous_action = vtrace_error_discrete_action
