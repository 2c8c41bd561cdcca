"""``build_adam`` (torch's Adam, fused kernel where this torch build has one) and ``has_mode_dependent_layers``."""

import pytest
import torch

from ding.policy.common_utils import build_adam, has_mode_dependent_layers


def _train(opt_factory, steps=6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    opt = opt_factory(model.parameters())
    x = torch.randn(16, 4)
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return list(model.parameters()), opt


def test_build_adam_uses_the_fused_kernel_and_trains_like_torch_adam():
    ours, ours_opt = _train(lambda params: build_adam(params, lr=1e-2))
    assert ours_opt.param_groups[0]['fused']  # torch has a fused CPU Adam
    ref, ref_opt = _train(lambda params: torch.optim.Adam(params, lr=1e-2, fused=True))
    assert all(torch.equal(a, b) for a, b in zip(ours, ref))
    ref_opt.load_state_dict(ours_opt.state_dict())  # checkpoints move between the two freely
    assert ref_opt.state_dict()['param_groups'][0]['lr'] == 1e-2


@pytest.mark.parametrize(
    ('layer', 'expected'),
    [
        (torch.nn.ReLU(), False),
        (torch.nn.LayerNorm(8), False),
        (torch.nn.BatchNorm1d(8), True),
        (torch.nn.Dropout(0.1), True),
        (torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2)), True),
    ],
)
def test_mode_dependent_layers_are_found_anywhere_in_the_model(layer, expected):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Sequential(layer))
    assert has_mode_dependent_layers(model) is expected
