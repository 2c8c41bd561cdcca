"""SAC / TD3 pieces against hand computations on tiny batches."""

import math

import pytest
import torch

from ding.rl_utils import smooth_target_action, tanh_gaussian_sample, twin_q_loss, twin_q_target


def test_tanh_gaussian_log_prob_matches_the_change_of_variables():
    torch.manual_seed(0)
    mu = torch.tensor([[0.3, -1.0], [2.0, 0.0]])
    sigma = torch.tensor([[0.5, 1.5], [0.2, 1.0]])
    torch.manual_seed(5)
    action, log_prob = tanh_gaussian_sample(mu, sigma)
    torch.manual_seed(5)
    eps = torch.randn_like(mu)  # the same draw
    for b in range(2):
        expected = 0.0
        for d in range(2):
            u = float(mu[b, d] + sigma[b, d] * eps[b, d])
            assert float(action[b, d]) == pytest.approx(math.tanh(u), abs=1e-6)
            normal = -0.5 * ((u - float(mu[b, d])) / float(sigma[b, d])) ** 2 - math.log(float(sigma[b, d]))
            expected += normal - 0.5 * math.log(2 * math.pi) - math.log(1 - math.tanh(u) ** 2)
        assert float(log_prob[b]) == pytest.approx(expected, rel=1e-4)


def test_tanh_gaussian_is_reparameterised_and_finite_when_saturated():
    mu = torch.tensor([[30.0]], requires_grad=True)
    action, log_prob = tanh_gaussian_sample(mu, torch.tensor([[0.1]]))
    assert torch.isfinite(log_prob).all() and float(action.detach()) == pytest.approx(1.0)
    (action.sum() + log_prob.sum()).backward()
    assert mu.grad is not None


def test_twin_q_target_takes_the_smaller_critic_and_the_entropy_bonus():
    q1, q2 = torch.tensor([1.0, 5.0, 2.0]), torch.tensor([3.0, 4.0, -1.0])
    reward, done = torch.tensor([0.5, 1.0, 0.0]), torch.tensor([False, False, True])
    log_prob = torch.tensor([-1.0, 0.5, 2.0])
    target = twin_q_target([q1, q2], reward, done, 0.9, log_prob, alpha=0.2)
    expected = [0.5 + 0.9 * (1.0 + 0.2), 1.0 + 0.9 * (4.0 - 0.1), 0.0]
    assert target.tolist() == pytest.approx(expected)
    assert twin_q_target([q1], reward, done, 0.9).tolist() == pytest.approx([1.4, 5.5, 0.0])  # TD3 / one critic


def test_twin_q_loss_sums_each_critics_weighted_mse():
    q1 = torch.tensor([1.0, 2.0], requires_grad=True)
    q2 = torch.tensor([0.0, 4.0], requires_grad=True)
    target, weight = torch.tensor([2.0, 2.0]), torch.tensor([1.0, 3.0])
    loss, td_error = twin_q_loss([q1, q2], target, weight)
    assert float(loss.detach()) == pytest.approx((1.0 * 1 + 0 * 3) / 2 + (4.0 * 1 + 4.0 * 3) / 2)
    assert td_error.tolist() == [1.0, 0.0]
    loss.backward()
    assert q1.grad is not None and q2.grad is not None


def test_smooth_target_action_clips_noise_then_action():
    torch.manual_seed(0)
    action = torch.tensor([[0.95], [-0.2], [0.0]]).expand(3, 1000)
    out = smooth_target_action(action, noise_sigma=1.0, noise_min=-0.5, noise_max=0.5)
    assert out.max() <= 1.0 and (out - action).abs().max() <= 0.5 + 1e-6
    assert float(out[0].max()) == 1.0  # 0.95 + noise saturates at the bound
