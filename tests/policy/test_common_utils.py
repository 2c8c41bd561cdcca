"""``build_adam``: torch's Adam with the fused kernel where this torch build has one."""

import torch

from ding.policy.common_utils import build_adam


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
