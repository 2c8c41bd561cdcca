import pytest
import torch

from ding.rl_utils import (
    nstep_return,
    nstep_return_data,
    q_1step_td_data,
    q_1step_td_error,
    q_nstep_td_data,
    q_nstep_td_error,
    q_nstep_td_target,
    v_1step_td_data,
    v_1step_td_error,
)


def test_one_step_target_by_hand():
    # Q(s, .) for 2 samples, chosen actions 1 and 0; next-state Q from the target net, next actions 0 and 1.
    q = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    next_q = torch.tensor([[10.0, 20.0], [30.0, 40.0]])
    data = q_nstep_td_data(
        q,
        next_q,
        torch.tensor([1, 0]),
        torch.tensor([0, 1]),
        torch.tensor([1.0, 2.0]),
        torch.tensor([False, True]),
        None,
    )
    q_s_a, target = q_nstep_td_target(data, gamma=0.9)
    assert q_s_a.tolist() == [2.0, 3.0]
    # sample 0: 1 + 0.9 * 10 = 10; sample 1 is terminal: just its reward 2
    assert target.tolist() == pytest.approx([10.0, 2.0])
    loss, per_sample = q_nstep_td_error(data, gamma=0.9)
    assert per_sample.tolist() == pytest.approx([(10 - 2) ** 2, (2 - 3) ** 2])
    assert loss.item() == pytest.approx((64 + 1) / 2)


def test_one_step_error_matches_nstep_with_one_step():
    q = torch.tensor([[0.5, -1.0]])
    data = q_1step_td_data(
        q,
        torch.tensor([[2.0, 3.0]]),
        torch.tensor([0]),
        torch.tensor([1]),
        torch.tensor([1.0]),
        torch.tensor([0.0]),
        None,
    )
    # target = 1 + 0.5 * 3 = 2.5, error 2.0
    assert q_1step_td_error(data, 0.5).item() == pytest.approx(4.0)


def test_three_step_return_with_done_and_truncation():
    gamma = 0.5
    reward = torch.tensor(
        [
            [1.0, 1.0, 1.0],  # r_t        (nstep, B) = (3, 3)
            [2.0, 2.0, 0.0],  # r_{t+1}
            [4.0, 4.0, 0.0],
        ]
    )  # r_{t+2}
    next_value = torch.tensor([8.0, 8.0, 8.0])
    # sample 0: a full window that continues -> 1 + 0.5*2 + 0.25*4 + 0.125*8 = 4
    # sample 1: the window ends in a termination -> no bootstrap: 1 + 1 + 1 = 3
    # sample 2: a truncated / cut window after one real step -> bootstrap with gamma^1: 1 + 0.5*8 = 5
    done = torch.tensor([False, True, False])
    value_gamma = torch.tensor([gamma**3, gamma**3, gamma**1])
    ret = nstep_return(nstep_return_data(reward, next_value, done), gamma, 3, value_gamma)
    assert ret.tolist() == pytest.approx([4.0, 3.0, 5.0])
    # without value_gamma every sample bootstraps with gamma^n
    ret = nstep_return(nstep_return_data(reward, next_value, done), gamma, 3)
    assert ret.tolist() == pytest.approx([4.0, 3.0, 1.0 + 0.125 * 8])


def test_weights_scale_each_sample():
    q = torch.zeros(2, 2)
    data = q_nstep_td_data(
        q,
        torch.zeros(2, 2),
        torch.tensor([0, 0]),
        torch.tensor([0, 0]),
        torch.tensor([[1.0, 2.0]]),
        torch.tensor([1.0, 1.0]),
        torch.tensor([1.0, 0.0]),
    )
    loss, per_sample = q_nstep_td_error(data, 0.9, nstep=1)
    assert per_sample.tolist() == [1.0, 4.0]
    assert loss.item() == pytest.approx(0.5)  # (1 * 1 + 4 * 0) / 2


def test_reward_shape_is_checked():
    data = q_nstep_td_data(
        torch.zeros(2, 2),
        torch.zeros(2, 2),
        torch.tensor([0, 0]),
        torch.tensor([0, 0]),
        torch.zeros(2),
        torch.zeros(2),
        None,
    )
    with pytest.raises(ValueError, match='nstep=3'):
        q_nstep_td_error(data, 0.9, nstep=3)


def test_gradient_flows_only_into_q():
    q = torch.tensor([[1.0, 2.0]], requires_grad=True)
    next_q = torch.tensor([[3.0, 4.0]], requires_grad=True)
    data = q_nstep_td_data(
        q, next_q, torch.tensor([0]), torch.tensor([1]), torch.tensor([0.0]), torch.tensor([0.0]), None
    )
    loss, _ = q_nstep_td_error(data, 1.0)
    loss.backward()
    assert q.grad.tolist() == [[2 * (1.0 - 4.0), 0.0]]
    assert next_q.grad is None


def test_state_value_td():
    data = v_1step_td_data(
        torch.tensor([1.0, 1.0]), torch.tensor([2.0, 2.0]), torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0]), None
    )
    # targets: 0 + 0.5*2 = 1 (error 0), terminal 1 (error 0)
    assert v_1step_td_error(data, 0.5).item() == pytest.approx(0.0)
