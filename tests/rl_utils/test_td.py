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


def test_rescaled_nstep_error_matches_a_loop_over_samples():
    from ding.rl_utils import q_nstep_td_error_with_rescale, value_inv_transform, value_transform

    g = torch.Generator().manual_seed(0)
    B, A, nstep, gamma = 5, 3, 3, 0.9
    q = torch.randn(B, A, generator=g) * 5
    next_q = torch.randn(B, A, generator=g) * 5
    action, next_action = torch.randint(0, A, (B,), generator=g), torch.randint(0, A, (B,), generator=g)
    reward = torch.rand(nstep, B, generator=g) * 10
    done = torch.tensor([False, True, False, False, True])
    weight = torch.rand(B, generator=g)
    value_gamma = torch.tensor([gamma**3, gamma**2, gamma, gamma**3, gamma**3])
    data = q_nstep_td_data(q, next_q, action, next_action, reward, done, weight)
    loss, td = q_nstep_td_error_with_rescale(data, gamma, nstep, value_gamma=value_gamma)

    expected_td, expected_loss = [], 0.0
    for b in range(B):
        ret = sum(gamma**i * reward[i, b].item() for i in range(nstep))
        if not done[b]:
            ret += value_gamma[b].item() * value_inv_transform(next_q[b, next_action[b]]).item()
        expected_td.append(value_transform(torch.tensor(ret)).item() - q[b, action[b]].item())
        expected_loss += weight[b].item() * expected_td[-1] ** 2 / B
    assert td.tolist() == pytest.approx(expected_td, rel=1e-5)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)


def test_rescaled_error_with_identity_transforms_is_the_plain_nstep_error():
    from ding.rl_utils import q_nstep_td_error_with_rescale

    g = torch.Generator().manual_seed(1)
    data = q_nstep_td_data(
        torch.randn(4, 2, generator=g), torch.randn(4, 2, generator=g), torch.tensor([0, 1, 1, 0]),
        torch.tensor([1, 1, 0, 0]), torch.rand(2, 4, generator=g), torch.tensor([0, 0, 1, 0]), None,
    )  # fmt: skip
    loss, td = q_nstep_td_error_with_rescale(data, 0.5, 2, trans_fn=lambda x: x, inv_trans_fn=lambda x: x)
    plain_loss, _ = q_nstep_td_error(data, 0.5, 2)
    q_s_a, target = q_nstep_td_target(data, 0.5, 2)
    torch.testing.assert_close(loss, plain_loss)
    torch.testing.assert_close(td, target - q_s_a)
