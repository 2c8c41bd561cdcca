"""ding's Adam: torch's maths and state dict, without importing the compiler stack in eager training."""

import subprocess
import sys

import torch

from ding.torch_utils import Adam
from tests.helpers.processes import child_env


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
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, env=child_env())
    assert out.stdout.strip() == 'False'


def _train_varied(opt_cls):
    """Fused Adam through the situations a training run meets: a frozen parameter (no gradient) for a few steps,
    a learning-rate change, a state-dict round trip and a second parameter group added late."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    extra = torch.nn.Linear(2, 2)
    opt = opt_cls(model.parameters(), lr=1e-2, fused=True, weight_decay=1e-4)
    x = torch.randn(16, 4)
    for i in range(12):
        opt.zero_grad(set_to_none=True)
        out = model(x)
        if i >= 8:
            out = extra(out)
        out.pow(2).mean().backward()
        if 3 <= i < 5:
            model[0].bias.grad = None  # skipped by Adam for these steps
        if i == 5:
            opt.param_groups[0]['lr'] = 3e-3
            opt.load_state_dict(opt.state_dict())
        if i == 8:
            opt.add_param_group({'params': extra.parameters(), 'lr': 5e-3})
        opt.step()
    return list(model.parameters()) + list(extra.parameters()), opt


def test_fused_steps_match_torch_bit_for_bit():
    ours, ours_opt = _train_varied(Adam)
    ref, ref_opt = _train_varied(torch.optim.Adam)
    assert all(torch.equal(a, b) for a, b in zip(ours, ref))
    for a, b in zip(ours_opt.state_dict()['state'].values(), ref_opt.state_dict()['state'].values()):
        assert all(torch.equal(a[k], b[k]) for k in ('step', 'exp_avg', 'exp_avg_sq'))


def test_step_hooks_run_once_and_the_profiler_sees_the_step():
    model = torch.nn.Linear(3, 1)
    opt = Adam(model.parameters(), lr=0.1, fused=True)
    calls = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append('pre'))
    opt.register_step_post_hook(lambda o, a, k: calls.append('post'))
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
    assert calls == ['pre', 'post'] * 2
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        opt.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
    names = {e.name for e in prof.events()}
    assert 'Optimizer.step#Adam.step' in names and 'Optimizer.zero_grad#Adam.zero_grad' in names
