import pytest
import torch

from ding.rl_utils import gae, gae_data


def test_three_step_terminated_trajectory_by_hand():
    gamma, lam = 0.9, 0.8
    value = torch.tensor([1.0, 2.0, 3.0])
    next_value = torch.tensor([2.0, 3.0, 100.0])  # the last next value is ignored: the episode terminated
    reward = torch.tensor([1.0, 0.0, 2.0])
    done = torch.tensor([False, False, True])
    d0 = 1 + 0.9 * 2 - 1  # 1.8
    d1 = 0 + 0.9 * 3 - 2  # 0.7
    d2 = 2 - 3  # -1
    a2 = d2
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    adv = gae(gae_data(value, next_value, reward, done, None), gamma, lam)
    assert adv.tolist() == pytest.approx([a0, a1, a2], abs=1e-5)


def test_cut_segment_bootstraps_from_last_next_value():
    gamma, lam = 0.9, 0.8
    value = torch.tensor([1.0, 2.0, 3.0])
    next_value = torch.tensor([2.0, 3.0, 4.0])
    reward = torch.tensor([1.0, 0.0, 2.0])
    done = torch.zeros(3, dtype=torch.bool)
    traj_flag = torch.tensor([False, False, True])  # segment end, not a termination
    a2 = 2 + 0.9 * 4 - 3
    a1 = (0 + 0.9 * 3 - 2) + gamma * lam * a2
    a0 = (1 + 0.9 * 2 - 1) + gamma * lam * a1
    adv = gae(gae_data(value, next_value, reward, done, traj_flag), gamma, lam)
    assert adv.tolist() == pytest.approx([a0, a1, a2], abs=1e-5)


def test_traj_flag_stops_the_recursion_between_segments():
    value = torch.zeros(2)
    next_value = torch.ones(2)
    reward = torch.zeros(2)
    done = torch.zeros(2)
    adv = gae(gae_data(value, next_value, reward, done, torch.tensor([1.0, 1.0])), 1.0, 1.0)
    assert adv.tolist() == [1.0, 1.0]  # each is its own delta; no accumulation across the flag
    adv = gae(gae_data(value, next_value, reward, done, torch.tensor([0.0, 1.0])), 1.0, 1.0)
    assert adv.tolist() == [2.0, 1.0]


def test_lambda_one_gives_discounted_return_minus_value_and_batches_work():
    gamma = 0.5
    reward = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 4.0]])  # (T=3, B=2)
    value = torch.zeros(3, 2)
    done = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    adv = gae(gae_data(value, torch.zeros(3, 2), reward, done, None), gamma, 1.0)
    assert adv[:, 0].tolist() == pytest.approx([1.75, 1.5, 1.0])
    assert adv[:, 1].tolist() == pytest.approx([1.0, 2.0, 4.0])


def test_shape_mismatch_is_reported():
    with pytest.raises(ValueError, match='share one shape'):
        gae(gae_data(torch.zeros(3), torch.zeros(2), torch.zeros(3), torch.zeros(3), None))
