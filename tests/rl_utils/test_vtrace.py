import pytest
import torch

from ding.rl_utils import (
    vtrace_advantage,
    vtrace_data,
    vtrace_error_continuous_action,
    vtrace_error_discrete_action,
    vtrace_nstep_return,
    vtrace_targets,
)


def paper_vtrace(rhos, rewards, values, gamma, lam, rho_bar, c_bar, done=None, truncated=None, mask=None):
    """Eq. 1 of Espeholt et al. (2018) written out per env and per step (an explicit sum, no recursion):
    ``v_s = V(x_s) + sum_t (prod_{i<t} gamma_i lambda c_i) delta_t``. Plain python floats."""
    T, B = len(rewards), len(rewards[0])
    out = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for s in range(T):
            total, coeff = values[s][b], 1.0
            for t in range(s, T):
                valid = 1.0 if mask is None else float(mask[t][b])
                discount = gamma * (0.0 if done is not None and done[t][b] else 1.0)
                rho = min(rho_bar, rhos[t][b]) * valid
                delta = rho * (rewards[t][b] + discount * values[t + 1][b] - values[t][b])
                total += coeff * delta
                cut = truncated is not None and truncated[t][b]
                coeff *= discount * lam * min(c_bar, rhos[t][b]) * valid * (0.0 if cut else 1.0)
            out[s][b] = total
    return out


def random_unroll(T=7, B=5, seed=0, boundaries=False):
    g = torch.Generator().manual_seed(seed)
    log_rhos = torch.randn(T, B, generator=g)
    reward = torch.randn(T, B, generator=g)
    values = torch.randn(T + 1, B, generator=g)
    extra = {}
    if boundaries:
        extra['done'] = torch.rand(T, B, generator=g) < 0.2
        extra['truncated'] = (torch.rand(T, B, generator=g) < 0.2) & ~extra['done']
        extra['mask'] = (torch.rand(T, B, generator=g) > 0.2).float()
    return log_rhos, reward, values, extra


@pytest.mark.parametrize('boundaries', [False, True])
@pytest.mark.parametrize('rho_bar, c_bar, lam', [(1.0, 1.0, 1.0), (1.0, 1.0, 0.95), (2.0, 0.5, 0.9), (100.0, 100.0, 1)])
def test_targets_match_the_papers_formula_on_random_inputs(boundaries, rho_bar, c_bar, lam):
    gamma = 0.9
    log_rhos, reward, values, extra = random_unroll(seed=int(rho_bar * 10 + c_bar + lam), boundaries=boundaries)
    vs, adv = vtrace_targets(log_rhos, reward, values, gamma, lam, rho_bar, c_bar, rho_pg_clip_ratio=1.0, **extra)
    listed = {k: v.tolist() for k, v in extra.items()}
    expected = paper_vtrace(
        log_rhos.exp().tolist(), reward.tolist(), values.tolist(), gamma, lam, rho_bar, c_bar, **listed
    )
    torch.testing.assert_close(vs, torch.tensor(expected), atol=1e-5, rtol=1e-5)
    # policy-gradient advantage: rho_pg * (r_s + gamma_s * v_{s+1} - V(x_s)), v_T = V(x_T)
    v_next = torch.cat([torch.tensor(expected), values[-1:]])[1:]
    discount = gamma * (1.0 - extra['done'].float()) if boundaries else gamma
    valid = extra['mask'] if boundaries else 1.0
    expected_adv = log_rhos.exp().clamp(max=1.0) * valid * (reward + discount * v_next - values[:-1])
    torch.testing.assert_close(adv, expected_adv, atol=1e-5, rtol=1e-5)


def test_on_policy_lambda_one_targets_are_nstep_bootstrapped_returns():
    T, B, gamma = 6, 3, 0.8
    _, reward, values, _ = random_unroll(T, B, seed=3)
    ones = torch.ones(T, B)
    vs = vtrace_nstep_return(ones, ones, reward, values, gamma, 1.0)
    for s in range(T):
        nstep = sum(gamma ** (t - s) * reward[t] for t in range(s, T)) + gamma ** (T - s) * values[T]
        assert vs[s].tolist() == pytest.approx(nstep.tolist(), abs=1e-5)


def test_on_policy_return_stops_at_a_termination_and_bootstraps_at_a_truncation():
    gamma = 0.5
    reward = torch.tensor([[1.0, 1.0], [2.0, 2.0], [0.0, 0.0], [4.0, 4.0]])
    values = torch.tensor([[9.0, 9.0], [9.0, 9.0], [3.0, 3.0], [9.0, 9.0], [5.0, 5.0]])
    done = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    truncated = torch.tensor([[False, False], [False, True], [False, False], [False, False]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 1.0]])  # step 2 is the reset step
    vs, _ = vtrace_targets(torch.zeros(4, 2), reward, values, gamma, 1.0, done=done, truncated=truncated, mask=mask)
    # env 0 terminates at step 1: 1 + 0.5 * 2; env 1 is cut there and bootstraps from V(obs[2]) = 3
    assert vs[:2, 0].tolist() == pytest.approx([2.0, 2.0])
    assert vs[:2, 1].tolist() == pytest.approx([1 + 0.5 * (2 + 0.5 * 3), 2 + 0.5 * 3])
    assert vs[2].tolist() == [3.0, 3.0]  # the reset step keeps V(x_t): no correction
    assert vs[3].tolist() == pytest.approx([4 + 0.5 * 5, 4 + 0.5 * 5])


def test_clipping_bounds_each_ratio_where_it_is_used():
    T, B = 1, 4
    reward, values = torch.ones(T, B), torch.zeros(T + 1, B)
    log_rhos = torch.log(torch.tensor([[0.5, 1.0, 3.0, 10.0]]))
    # one step: v_0 = V(x_0) + min(rho_bar, rho) * delta; c_bar has nothing to trace
    vs, adv = vtrace_targets(log_rhos, reward, values, 1.0, 1.0, rho_clip_ratio=2.0, c_clip_ratio=0.1)
    assert vs[0].tolist() == pytest.approx([0.5, 1.0, 2.0, 2.0])
    assert adv[0].tolist() == pytest.approx([0.5, 1.0, 1.0, 1.0])  # rho_pg_clip_ratio=1 by default
    # c_bar scales the trace of the next step's correction into this one
    reward, values = torch.tensor([[0.0], [1.0]]), torch.zeros(3, 1)
    for c_bar, expected in ((1.0, 3.0 * 1.0), (0.5, 3.0 * 0.5)):
        vs, _ = vtrace_targets(torch.log(torch.tensor([[3.0], [3.0]])), reward, values, 1.0, 1.0, 100.0, c_bar)
        assert vs[0].item() == pytest.approx(expected)


def test_advantage_accepts_targets_with_or_without_the_bootstrap_row():
    _, reward, values, _ = random_unroll(4, 2, seed=5)
    vs = vtrace_nstep_return(torch.ones(4, 2), torch.ones(4, 2), reward, values, 0.9, 0.9)
    short = vtrace_advantage(torch.ones(4, 2), reward, vs, values, 0.9)
    full = vtrace_advantage(torch.ones(4, 2), reward, torch.cat([vs, values[-1:]]), values, 0.9)
    assert torch.equal(short, full)


def test_loss_terms_gradients_and_masked_steps():
    T, B, A = 5, 3, 4
    torch.manual_seed(0)
    target = torch.randn(T, B, A, requires_grad=True)
    value = torch.randn(T + 1, B, requires_grad=True)
    behaviour, action, reward = torch.randn(T, B, A), torch.randint(0, A, (T, B)), torch.randn(T, B)
    mask = torch.ones(T, B)
    mask[2, 1] = 0.0
    loss = vtrace_error_discrete_action(vtrace_data(target, behaviour, action, value, reward, None, mask=mask))
    assert set(loss._fields) == {'policy_loss', 'value_loss', 'entropy_loss'}
    (loss.policy_loss + loss.value_loss).backward()
    assert target.grad is not None and value.grad is not None
    assert target.grad[2, 1].abs().sum() == 0.0  # a reset step carries no policy gradient
    assert value.grad[2, 1] == 0.0 and value.grad[-1].abs().sum() == 0.0  # nor value loss; bootstrap is a target
    # a masked step's reward changes nothing
    reward2 = reward.clone()
    reward2[2, 1] += 100.0
    again = vtrace_error_discrete_action(vtrace_data(target, behaviour, action, value, reward2, None, mask=mask))
    assert again.policy_loss.item() == pytest.approx(loss.policy_loss.item())
    assert again.value_loss.item() == pytest.approx(loss.value_loss.item())


def test_continuous_actions_use_the_gaussian_log_probability():
    T, B, A = 3, 2, 2
    mu = torch.zeros(T, B, A, requires_grad=True)
    sigma = torch.ones(T, B, A)
    data = vtrace_data(
        {'mu': mu, 'sigma': sigma},
        {'mu': torch.zeros(T, B, A), 'sigma': sigma},
        torch.randn(T, B, A),
        torch.zeros(T + 1, B),
        torch.ones(T, B),
        None,
    )
    loss = vtrace_error_continuous_action(data, gamma=0.9)
    loss.policy_loss.backward()
    assert mu.grad is not None and torch.isfinite(mu.grad).all()


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match='bootstrap_values must be'):
        vtrace_nstep_return(torch.ones(3, 2), torch.ones(3, 2), torch.ones(3, 2), torch.zeros(3, 2))
    with pytest.raises(ValueError, match='clipped_cs must have the reward shape'):
        vtrace_nstep_return(torch.ones(3, 2), torch.ones(3, 1), torch.ones(3, 2), torch.zeros(4, 2))
