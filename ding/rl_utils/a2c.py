"""Advantage actor-critic loss."""

from __future__ import annotations

from collections import namedtuple

from .distribution import logp_entropy

a2c_data = namedtuple('a2c_data', ['logit', 'action', 'value', 'adv', 'return_', 'weight'])
a2c_loss = namedtuple('a2c_loss', ['policy_loss', 'value_loss', 'entropy_loss'])


def a2c_error(data: a2c_data) -> a2c_loss:
    """``policy_loss = -mean(log pi(a) * A)``, ``value_loss = mean((R - V)^2)``, ``entropy_loss = mean(H(pi))``.

    ``logit`` is (B, A) logits or a ``{'mu', 'sigma'}`` dict. The caller combines the terms as
    ``policy_loss + value_weight * value_loss - entropy_weight * entropy_loss``.
    """
    logit, action, value, adv, return_, weight = data
    logp, entropy = logp_entropy(logit, action)
    adv = adv.detach()
    if weight is None:
        policy_loss = -(logp * adv).mean()
        value_loss = (return_.detach() - value).pow(2).mean()
        entropy_loss = entropy.mean()
    else:
        policy_loss = -(logp * adv * weight).mean()
        value_loss = ((return_.detach() - value).pow(2) * weight).mean()
        entropy_loss = (entropy * weight).mean()
    return a2c_loss(policy_loss, value_loss, entropy_loss)


a2c_error_continuous = a2c_error
