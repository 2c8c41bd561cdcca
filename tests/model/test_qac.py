"""``continuous_qac``: actor outputs for both action spaces, one or two critics, bad shapes refused."""

import pytest
import torch

from ding.model import ContinuousQAC, create_model


def test_reparameterization_actor_and_twin_critics():
    model = create_model(dict(type='continuous_qac', obs_shape=3, action_shape=2, twin_critic=True))
    obs = torch.randn(5, 3)
    mu, sigma = model(obs, mode='compute_actor')['logit']
    assert mu.shape == sigma.shape == (5, 2) and (sigma > 0).all()
    q1, q2 = model({'obs': obs, 'action': torch.rand(5, 2)}, mode='compute_critic')['q_value']
    assert q1.shape == q2.shape == (5,) and not torch.equal(q1, q2)  # two separately initialised critics


def test_regression_actor_is_bounded_and_one_critic_gives_one_tensor():
    model = ContinuousQAC(3, 1, action_space='regression')
    obs = torch.randn(4, 3) * 100
    action = model(obs, mode='compute_actor')['action']
    assert action.shape == (4, 1) and action.abs().max() <= 1.0
    q = model({'obs': obs, 'action': action.squeeze(-1)}, mode='compute_critic')['q_value']  # (B,) actions work too
    assert isinstance(q, torch.Tensor) and q.shape == (4,)
    assert create_model(dict(type='qac', obs_shape=3, action_shape=1)).action_space == 'reparameterization'


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match='action_space'):
        ContinuousQAC(3, 1, action_space='discrete')
    with pytest.raises(ValueError, match='obs_shape'):
        ContinuousQAC([4, 84, 84], 1)
    with pytest.raises(ValueError, match='mode'):
        ContinuousQAC(3, 1)(torch.zeros(1, 3), mode='compute_actor_critic')
