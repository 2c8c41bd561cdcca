"""``c51dqn`` and ``qrdqn``: distributions, quantile fractions and the expected Q values they act on."""

import pytest
import torch

from ding.model import C51DQN, QRDQN, create_model


def test_c51_probabilities_and_expected_q():
    model = C51DQN(4, 3, encoder_hidden_size_list=[16, 16], v_min=-2, v_max=2, n_atom=5)
    out = model(torch.randn(6, 4))
    dist = out['distribution']
    assert dist.shape == (6, 3, 5) and torch.allclose(dist.sum(-1), torch.ones(6, 3))
    atoms = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])
    assert torch.allclose(out['logit'], (dist * atoms).sum(-1), atol=1e-6)
    with pytest.raises(ValueError, match='n_atom'):
        C51DQN(4, 3, n_atom=1)


def test_qrdqn_quantiles_tau_and_mean():
    model = create_model(dict(type='qrdqn', obs_shape=4, action_shape=2, num_quantiles=4))
    assert isinstance(model, QRDQN)
    out = model(torch.randn(3, 4))
    assert out['q'].shape == (3, 2, 4) and out['tau'].shape == (3, 4, 1)
    assert out['tau'][0, :, 0].tolist() == [0.125, 0.375, 0.625, 0.875]
    assert torch.allclose(out['logit'], out['q'].mean(-1))
    assert 'tau' not in model.state_dict()  # derived from num_quantiles, not a weight
