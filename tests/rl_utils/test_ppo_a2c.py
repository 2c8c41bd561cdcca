import math

import pytest
import torch

from ding.rl_utils import (
    a2c_data,
    a2c_error,
    ppo_data,
    ppo_error_continuous,
    ppo_policy_data,
    ppo_policy_error,
    ppo_value_data,
    ppo_value_error,
)


def _logits_for_ratio(ratio: float):
    """Two-action logits where pi_old(a=0) = 0.5 and pi_new(a=0) = 0.5 * ratio."""
    old = torch.zeros(1, 2)
    p_new = 0.5 * ratio
    new = torch.tensor([[math.log(p_new), math.log(1 - p_new)]], requires_grad=True)
    return new, old


@pytest.mark.parametrize(
    'ratio,adv,expected',
    [
        (1.1, 2.0, -1.1 * 2.0),  # inside the clip range: plain ratio * A
        (1.1, -2.0, 1.1 * 2.0),
        (1.5, 2.0, -1.2 * 2.0),  # above 1 + eps with A > 0: clipped to 1.2
        (1.5, -2.0, 1.5 * 2.0),  # above 1 + eps with A < 0: min() keeps the unclipped, more pessimistic term
        (0.5, 2.0, -0.5 * 2.0),  # below 1 - eps with A > 0: unclipped term is the smaller one
        (0.5, -2.0, 0.8 * 2.0),  # below 1 - eps with A < 0: clipped to 0.8
    ],
)
def test_clipped_surrogate_by_hand(ratio, adv, expected):
    new, old = _logits_for_ratio(ratio)
    loss, info = ppo_policy_error(ppo_policy_data(new, old, torch.tensor([0]), torch.tensor([adv]), None), 0.2)
    assert loss.policy_loss.item() == pytest.approx(expected, rel=1e-5)
    assert info.clipfrac.item() == (1.0 if abs(ratio - 1) > 0.2 else 0.0)
    # the entropy term is the new policy's entropy
    p = 0.5 * ratio
    assert loss.entropy_loss.item() == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)), rel=1e-5)


def test_clipped_region_has_no_policy_gradient():
    new, old = _logits_for_ratio(1.5)
    loss, _ = ppo_policy_error(ppo_policy_data(new, old, torch.tensor([0]), torch.tensor([2.0]), None), 0.2)
    loss.policy_loss.backward()
    assert torch.all(new.grad == 0)


def test_dual_clip_bounds_negative_advantage_loss():
    new, old = _logits_for_ratio(1.9)
    loss, _ = ppo_policy_error(
        ppo_policy_data(new, old, torch.tensor([0]), torch.tensor([-1.0]), None), 0.2, dual_clip=1.5
    )
    assert loss.policy_loss.item() == pytest.approx(1.5)  # min(-1.9, -1.2) = -1.9, max with -1.5 -> -1.5


def test_value_clip_by_hand():
    value_old = torch.tensor([1.0, 1.0])
    value_new = torch.tensor([2.0, 1.1])
    ret = torch.tensor([3.0, 0.0])
    # sample 0: unclipped (3-2)^2 = 1, clipped V = 1.2 -> (3-1.2)^2 = 3.24 -> max 3.24
    # sample 1: unclipped (0-1.1)^2 = 1.21, inside the range -> 1.21
    v = ppo_value_error(ppo_value_data(value_new, value_old, ret, None), 0.2, use_value_clip=True)
    assert v.item() == pytest.approx(0.5 * (3.24 + 1.21) / 2)
    v = ppo_value_error(ppo_value_data(value_new, value_old, ret, None), 0.2, use_value_clip=False)
    assert v.item() == pytest.approx(0.5 * (1.0 + 1.21) / 2)


def test_ppo_error_combines_terms_and_continuous_matches_gaussian_density():
    mu_old, sigma = torch.zeros(2, 1), torch.ones(2, 1)
    mu_new = torch.tensor([[0.1], [-0.1]])
    action = torch.tensor([[0.5], [0.5]])
    data = ppo_data(
        {'mu': mu_new, 'sigma': sigma},
        {'mu': mu_old, 'sigma': sigma},
        action,
        torch.zeros(2),
        torch.zeros(2),
        torch.tensor([1.0, 1.0]),
        torch.zeros(2),
        None,
    )
    loss, info = ppo_error_continuous(data, 0.2)
    ratio = torch.exp(-0.5 * (0.5 - mu_new.squeeze(1)) ** 2 + 0.5 * 0.5**2)
    assert loss.policy_loss.item() == pytest.approx(-ratio.mean().item(), rel=1e-5)
    assert loss.entropy_loss.item() == pytest.approx(0.5 + 0.5 * math.log(2 * math.pi), rel=1e-5)
    assert loss.value_loss.item() == 0.0
    assert info.approx_kl.item() == pytest.approx(-torch.log(ratio).mean().item(), abs=1e-6)


def test_a2c_loss_by_hand():
    logit = torch.log(torch.tensor([[0.25, 0.75], [0.5, 0.5]]))
    action = torch.tensor([1, 0])
    value = torch.tensor([1.0, 2.0])
    adv = torch.tensor([2.0, -1.0])
    ret = torch.tensor([3.0, 1.0])
    loss = a2c_error(a2c_data(logit, action, value, adv, ret, None))
    expected_pg = -(math.log(0.75) * 2.0 + math.log(0.5) * -1.0) / 2
    assert loss.policy_loss.item() == pytest.approx(expected_pg, rel=1e-5)
    assert loss.value_loss.item() == pytest.approx(((3 - 1) ** 2 + (1 - 2) ** 2) / 2)
    h0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert loss.entropy_loss.item() == pytest.approx((h0 + math.log(2)) / 2, rel=1e-5)
