"""C51's projected target and QR-DQN's quantile Huber loss, each against a hand-written loop on a tiny batch."""

import math

import pytest
import torch

from ding.rl_utils import (
    dist_nstep_td_data,
    dist_nstep_td_error,
    qrdqn_nstep_td_data,
    qrdqn_nstep_td_error,
    quantile_huber,
)


def project_by_hand(ret, bootstrap, next_prob, v_min, v_max, n_atom):
    """Move each atom's probability to R + bootstrap * z_j and split it between the two nearest atoms."""
    delta = (v_max - v_min) / (n_atom - 1)
    m = [0.0] * n_atom
    for j in range(n_atom):
        tz = min(max(ret + bootstrap * (v_min + j * delta), v_min), v_max)
        b = (tz - v_min) / delta
        lo, hi = math.floor(b), math.ceil(b)
        if lo == hi:
            m[lo] += next_prob[j]
        else:
            m[lo] += next_prob[j] * (hi - b)
            m[hi] += next_prob[j] * (b - lo)
    return m


@pytest.mark.parametrize('nstep', [1, 2])
def test_c51_loss_matches_a_hand_projection(nstep):
    torch.manual_seed(0)
    B, A, n_atom, v_min, v_max, gamma = 3, 2, 5, -2.0, 2.0, 0.9
    dist = torch.softmax(torch.randn(B, A, n_atom), -1).requires_grad_()
    next_dist = torch.softmax(torch.randn(B, A, n_atom), -1)
    act, next_act = torch.tensor([0, 1, 1]), torch.tensor([1, 0, 1])
    reward = torch.tensor([[0.5, -1.0, 1.0], [0.25, 0.0, 3.0]])[
        :nstep
    ]  # (nstep, B); the last sample leaves the support
    done = torch.tensor([False, True, False])
    weight = torch.tensor([1.0, 0.5, 2.0])
    data = dist_nstep_td_data(dist, next_dist, act, next_act, reward, done, weight)
    loss, per_sample = dist_nstep_td_error(data, gamma, v_min, v_max, n_atom, nstep=nstep)

    expected = []
    for i in range(B):
        ret = sum(gamma**k * float(reward[k, i]) for k in range(nstep))
        bootstrap = 0.0 if done[i] else gamma**nstep
        m = project_by_hand(ret, bootstrap, next_dist[i, next_act[i]].tolist(), v_min, v_max, n_atom)
        assert sum(m) == pytest.approx(1.0, abs=1e-6)
        expected.append(-sum(m[j] * math.log(float(dist.detach()[i, act[i], j])) for j in range(n_atom)))
    assert per_sample.detach().tolist() == pytest.approx(expected, rel=1e-5)
    assert float(loss.detach()) == pytest.approx(sum(w * e for w, e in zip(weight.tolist(), expected)) / B, rel=1e-5)
    loss.backward()
    assert dist.grad is not None and dist.grad[0, 1].abs().sum() == 0  # only the taken action's row learns


def test_c51_atom_landing_on_the_grid_keeps_all_its_mass():
    # done=True: every target atom is the reward itself, 1.0 exactly on the atom grid [-2, -1, 0, 1, 2].
    dist = torch.full((1, 1, 5), 0.2)
    data = dist_nstep_td_data(dist, dist, torch.tensor([0]), torch.tensor([0]), torch.tensor([1.0]),
                              torch.tensor([True]), None)  # fmt: skip
    _, per_sample = dist_nstep_td_error(data, 0.9, -2.0, 2.0, 5)
    assert float(per_sample[0]) == pytest.approx(-math.log(0.2))


def huber_quantile_by_hand(u, tau, kappa):
    huber = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
    return abs(tau - (1.0 if u < 0 else 0.0)) * huber / kappa


@pytest.mark.parametrize('kappa', [1.0, 0.5])
def test_qrdqn_loss_matches_a_hand_loop(kappa):
    torch.manual_seed(1)
    B, A, N, gamma, nstep = 2, 3, 4, 0.9, 2
    q = (torch.randn(B, A, N) * 2).requires_grad_()
    next_q = torch.randn(B, A, N) * 2
    tau = ((torch.arange(N) + 0.5) / N).reshape(1, N, 1).expand(B, N, 1)
    act, next_act = torch.tensor([2, 0]), torch.tensor([1, 1])
    reward = torch.tensor([[1.0, -0.5], [0.5, 2.0]])
    done = torch.tensor([False, True])
    value_gamma = torch.tensor([0.81, 0.9])
    data = qrdqn_nstep_td_data(q, next_q, act, next_act, reward, done, tau, None)
    loss, per_sample = qrdqn_nstep_td_error(data, gamma, nstep, value_gamma=value_gamma, kappa=kappa)

    expected = []
    for b in range(B):
        ret = float(reward[0, b]) + gamma * float(reward[1, b])
        bootstrap = 0.0 if done[b] else float(value_gamma[b])
        targets = [ret + bootstrap * float(next_q[b, next_act[b], j]) for j in range(N)]
        total = 0.0
        for i in range(N):
            pred = float(q.detach()[b, act[b], i])
            total += sum(huber_quantile_by_hand(t - pred, (i + 0.5) / N, kappa) for t in targets) / N
        expected.append(total)
    assert per_sample.detach().tolist() == pytest.approx(expected, rel=1e-5)
    assert float(loss.detach()) == pytest.approx(sum(expected) / B, rel=1e-5)
    loss.backward()
    assert q.grad is not None and q.grad[0, 0].abs().sum() == 0


def test_quantile_huber_with_kappa_zero_is_the_plain_quantile_loss():
    u = torch.tensor([-2.0, 0.5])
    assert quantile_huber(u, torch.tensor(0.25), 0.0).tolist() == pytest.approx([0.75 * 2.0, 0.25 * 0.5])
    with pytest.raises(ValueError, match='kappa'):
        quantile_huber(u, torch.tensor(0.25), -1.0)
