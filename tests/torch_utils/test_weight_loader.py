"""``WeightLoader``: a model takes published weights, checked the first time and copied in place after."""

import pytest
import torch

from ding.torch_utils import WeightLoader
from ding.torch_utils.numpy_chain import NumpyChain


def _net() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _published(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_every_load_leaves_the_model_with_the_published_weights():
    learner, actor = _net(), _net()
    loader = WeightLoader(actor)
    for _ in range(3):
        with torch.no_grad():
            for p in learner.parameters():
                p.add_(torch.randn_like(p))
        loader.load(_published(learner))
        for (name, mine), theirs in zip(actor.state_dict().items(), learner.state_dict().values()):
            assert torch.equal(mine, theirs), name


def test_loads_are_in_place_so_a_numpy_chain_of_the_model_follows_them():
    learner, actor = _net(), _net()
    x = torch.randn(5, 4)
    chain = NumpyChain.trace(actor, x)
    assert chain is not None
    loader = WeightLoader(actor)
    loader.load(_published(learner))
    loader.load(_published(learner))  # the second load takes the in-place path
    assert torch.allclose(torch.from_numpy(chain(x.numpy())), learner(x).detach(), atol=1e-6)


def test_weights_of_another_model_are_refused_naming_the_key():
    loader = WeightLoader(_net())
    loader.load(_published(_net()))
    wrong = _published(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)))
    with pytest.raises(RuntimeError, match='2.weight'):
        loader.load(wrong)  # same keys, another shape: the first (checked) path would refuse it too
