"""ding's Adam: torch's maths and state dict, without importing the compiler stack in eager training."""
import subprocess
import sys

import torch

from ding.torch_utils import Adam


def _train(opt_cls, steps=6, **kwargs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    opt = opt_cls(model.parameters(), lr=1e-2, **kwargs)
    x = torch.randn(16, 4)
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return model, opt


def test_same_parameters_and_state_dict_as_torch_adam():
    for kwargs in ({}, {'fused': True}, {'weight_decay': 1e-3, 'amsgrad': True}):
        ours, ours_opt = _train(Adam, **kwargs)
        ref, ref_opt = _train(torch.optim.Adam, **kwargs)
        assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), ref.parameters()))
        ref_opt.load_state_dict(ours_opt.state_dict())  # checkpoints move between the two freely
        assert ref_opt.state_dict()['param_groups'][0]['lr'] == 1e-2


def test_closure_is_supported():
    model = torch.nn.Linear(3, 1)
    opt = Adam(model.parameters(), lr=0.1)
    x = torch.randn(8, 3)

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    before = closure().item()
    for _ in range(20):
        opt.step(closure)
    assert closure().item() < before


def test_eager_training_does_not_import_torch_dynamo():
    code = (
        'import sys, torch\n'
        'from ding.torch_utils import Adam\n'
        'm = torch.nn.Linear(4, 2); o = Adam(m.parameters(), lr=1e-3, fused=True)\n'
        'm(torch.randn(5, 4)).sum().backward(); o.step(); o.zero_grad(); o.load_state_dict(o.state_dict())\n'
        'print("torch._dynamo" in sys.modules)\n'
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == 'False'
