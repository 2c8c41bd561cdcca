"""``fast_call``: the models' direct sub-module path gives bit-identical numbers and still honours hooks/tracers."""

import copy

import pytest
import torch
import torch.nn as nn

from ding.model import DQN, VAC, FCEncoder
from ding.model.common import fast_call


def _outputs_and_grads(model: nn.Module, run) -> tuple:
    """Outputs of ``run(model)`` and the gradients of their sum w.r.t. every parameter."""
    model.zero_grad(set_to_none=True)
    out = run(model)
    leaves = [v for v in _flatten(out)]
    sum(x.sum() for x in leaves).backward()
    return [x.detach() for x in leaves], [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _flatten(out):
    if isinstance(out, dict):
        for v in out.values():
            yield from _flatten(v)
    else:
        yield out


def _module_path(model: nn.Module, run) -> tuple:
    """The same computation through ordinary ``nn.Module.__call__`` everywhere: a global forward hook makes
    every sub-module call observable, so ``fast_call`` must fall back to real module calls."""
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)
    try:
        return _outputs_and_grads(model, run)
    finally:
        handle.remove()


def _assert_bit_identical(a: tuple, b: tuple) -> None:
    (out_a, grad_a), (out_b, grad_b) = a, b
    assert len(out_a) == len(out_b) and len(grad_a) == len(grad_b) > 0
    for x, y in zip(out_a + grad_a, out_b + grad_b):
        assert torch.equal(x, y)


MODELS = {
    'dqn_dueling': (lambda: DQN(4, 2, [128, 128, 64]), lambda m, x: m(x)),
    'dqn_plain_2layer_head': (lambda: DQN(4, 3, [32, 16], dueling=False, head_layer_num=2), lambda m, x: m(x)),
    'dqn_tanh_layernorm': (lambda: DQN(4, 2, [32, 32], activation=nn.Tanh(), norm_type='LN'), lambda m, x: m(x)),
    'vac_discrete': (
        lambda: VAC(
            4, 2, encoder_hidden_size_list=[64, 64, 128], actor_head_hidden_size=128, critic_head_hidden_size=128
        ),
        lambda m, x: m(x, 'compute_actor_critic'),
    ),
    'vac_continuous_separate': (
        lambda: VAC(
            3,
            2,
            action_space='continuous',
            share_encoder=False,
            encoder_hidden_size_list=[32, 32],
            sigma_type='conditioned',
            bound_type='tanh',
        ),
        lambda m, x: m(x, 'compute_actor_critic'),
    ),
}


@pytest.mark.parametrize('name', sorted(MODELS))
@pytest.mark.parametrize('batch', [1, 5, 64])
def test_direct_path_is_bit_identical_to_module_calls(name, batch):
    build, run = MODELS[name]
    torch.manual_seed(0)
    model = build()
    x = torch.randn(batch, 3 if 'continuous' in name else 4)
    fast = _outputs_and_grads(model, lambda m: run(m, x))
    _assert_bit_identical(fast, _module_path(model, lambda m: run(m, x)))


def test_hooks_on_inner_layers_still_run_and_change_the_output():
    torch.manual_seed(0)
    model = DQN(4, 2, [16, 16])
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    before = model(x)['logit']
    seen = []
    handle = model.encoder.main[0].register_forward_hook(lambda m, i, o: seen.append(o.shape) or o * 0)
    try:
        zeroed_x, zeroed_y = model(x)['logit'], model(y)['logit']
    finally:
        handle.remove()
    assert seen == [torch.Size([3, 16])] * 2
    # The hook zeroes the first layer's output: what follows no longer depends on the input.
    assert torch.equal(zeroed_x, zeroed_y) and not torch.equal(zeroed_x, before)
    assert torch.equal(model(x)['logit'], before)  # hook removed: back to the direct path


def test_forward_pre_hook_on_a_container_runs():
    model = DQN(4, 2, [16, 16])
    calls = []
    handle = model.head.register_forward_pre_hook(lambda m, args: calls.append(m))
    try:
        model(torch.randn(2, 4))
    finally:
        handle.remove()
    assert calls == [model.head]


def test_parameters_are_read_at_call_time():
    """``load_state_dict``, re-assigned parameters and ``torch.func.functional_call`` are all seen."""
    torch.manual_seed(0)
    model, other = DQN(4, 2, [16, 16]), DQN(4, 2, [16, 16])
    x = torch.randn(3, 4)
    model.load_state_dict(other.state_dict())
    assert torch.equal(model(x)['logit'], other(x)['logit'])
    zeros = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    assert torch.equal(torch.func.functional_call(model, zeros, (x,))['logit'], torch.zeros(3, 2))
    model.head.A[-1].bias = nn.Parameter(torch.full((2,), 5.0))
    model.head.A[-1].weight = nn.Parameter(torch.zeros(2, 16))
    q = model(x)['logit']
    assert torch.equal(q[:, 0], q[:, 1])  # equal advantages: both actions get V


def test_state_dict_keys_are_unchanged():
    assert list(DQN(4, 2, [128, 128, 64]).state_dict()) == [
        'encoder.main.0.weight',
        'encoder.main.0.bias',
        'encoder.main.2.weight',
        'encoder.main.2.bias',
        'encoder.main.4.weight',
        'encoder.main.4.bias',
        'head.A.0.weight',
        'head.A.0.bias',
        'head.A.2.weight',
        'head.A.2.bias',
        'head.V.0.weight',
        'head.V.0.bias',
        'head.V.2.weight',
        'head.V.2.bias',
    ]


def test_dropout_keeps_its_train_and_eval_behaviour():
    torch.manual_seed(0)
    model = DQN(4, 2, [64, 64], dropout=0.5)
    x = torch.randn(8, 4)
    model.eval()
    assert torch.equal(model(x)['logit'], model(x)['logit'])
    model.train()
    assert not torch.equal(model(x)['logit'], model(x)['logit'])


def test_patched_instance_forward_is_used():
    model = DQN(4, 2, [16, 16])
    relu = model.encoder.main[1]
    relu.forward = lambda x: torch.zeros_like(x)
    q = model(torch.randn(3, 4))['logit']
    assert torch.equal(q[0], q[1]) and torch.equal(q[1], q[2])  # the first hidden layer's output is zeroed


def test_fx_symbolic_trace_records_leaf_modules():
    encoder = FCEncoder(4, [16, 8])
    graph_module = torch.fx.symbolic_trace(encoder)
    targets = [n.target for n in graph_module.graph.nodes if n.op == 'call_module']
    assert targets == ['main.0', 'main.1', 'main.2', 'main.3']
    x = torch.randn(2, 4)
    assert torch.equal(graph_module(x), encoder(x))


def test_fast_call_on_a_plain_sequential_and_a_deep_copy():
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2), nn.Sigmoid(), nn.Identity())
    x = torch.randn(3, 4)
    assert torch.equal(fast_call(seq, x), seq(x))
    clone = copy.deepcopy(seq)
    with torch.no_grad():
        clone[0].weight.add_(1.0)
    assert not torch.equal(fast_call(clone, x), fast_call(seq, x))
