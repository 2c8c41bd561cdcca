import numpy as np
import pytest
import torch
from torch import nn

from ding.torch_utils.numpy_chain import NumpyChain


class Logits(nn.Module):
    """A head returning a dict, as ding's heads do: the chain sees through the key lookup."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, 3)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return {'logit': self.head(self.encoder(obs))}['logit']


class Greedy(Logits):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(obs).argmax(dim=-1)


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs + self.layer(obs)


def test_a_batch_of_logits_is_written_into_the_callers_array_and_matches_torch():
    torch.manual_seed(0)
    module, obs = Logits(), torch.randn(16, 4)
    chain = NumpyChain.trace(module, obs)
    assert chain is not None and not chain.ends_in_argmax
    out = np.empty((16, 3), dtype=np.float32)
    before = obs.numpy().copy()
    result = chain(obs.numpy(), out=out)
    assert result is out
    np.testing.assert_allclose(out, module(obs).detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(obs.numpy(), before)  # the input is never written


def test_one_observation_and_an_argmax_chain():
    torch.manual_seed(1)
    module = Greedy()
    chain = NumpyChain.trace(module, torch.randn(8, 4))
    assert chain is not None and chain.ends_in_argmax
    obs = torch.randn(4)
    assert int(chain(obs.numpy())) == int(module(obs))


def test_weights_written_in_place_reach_the_chain_without_a_rebuild():
    torch.manual_seed(2)
    module, obs = Logits(), torch.randn(5, 4)
    chain = NumpyChain.trace(module, obs)
    assert chain is not None
    other = Logits()
    module.load_state_dict(other.state_dict())  # copies into the same parameter memory
    np.testing.assert_allclose(chain(obs.numpy()), other(obs).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('module', [Residual(), nn.Sequential(nn.Linear(4, 4), nn.Sigmoid())])
def test_anything_but_a_chain_of_known_layers_keeps_torch(module):
    assert NumpyChain.trace(module, torch.randn(3, 4)) is None
