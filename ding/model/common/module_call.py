"""``fast_call``: run a small network's sub-modules without ``nn.Module.__call__`` bookkeeping.

For CartPole-sized networks, calling every ``nn.Sequential`` / ``nn.Linear`` / ``nn.ReLU`` as a module costs more
CPU than the matrix maths: each call goes through ``__call__`` -> ``_call_impl`` -> ``forward``, and every
``self.weight`` is a Python-level ``Module.__getattr__``. ``fast_call(module, x)`` computes exactly what
``module(x)`` computes: the same torch functions, in the same order, on the same parameter tensors (read from the
modules at call time, so ``load_state_dict``, ``.to()``, re-assigned parameters and ``torch.func.functional_call``
are all seen), hence bit-identical outputs and gradients. It falls back to the ordinary module call wherever that
call could be observed: hooks on the module (checked per module) or global module hooks, a ``module.compile()``d
module, and torch.jit / torch.fx / torch.compile tracing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx._symbolic_trace as _fx_trace  # already imported by torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules import module as _module_impl


def _linear(m: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    p = m._parameters  # the dict ``Module.__getattr__`` reads, without its Python-level call
    return F.linear(x, p['weight'], p['bias'])


def _relu(m: nn.ReLU, x: torch.Tensor) -> torch.Tensor:
    return torch.relu_(x) if m.inplace else torch.relu(x)  # what F.relu runs


# Exact types only (a subclass may override ``forward``); each entry mirrors that layer's ``forward``.
_INLINE: dict[type, Callable[[Any, torch.Tensor], torch.Tensor]] = {
    nn.Linear: _linear,
    nn.ReLU: _relu,
    nn.Tanh: lambda m, x: torch.tanh(x),
    nn.Sigmoid: lambda m, x: torch.sigmoid(x),
    nn.Identity: lambda m, x: x,
}


def _globally_observed() -> bool:
    """Global module hooks would see each sub-module call, and tracers record them (jit scopes, fx leaf modules,
    dynamo's module handling): keep real module calls then."""
    return bool(
        _module_impl._global_forward_hooks
        or _module_impl._global_forward_pre_hooks
        or _module_impl._global_backward_hooks
        or _module_impl._global_backward_pre_hooks
        or torch._C._get_tracing_state()
        or _fx_trace._is_fx_tracing_flag
        or torch.compiler.is_compiling()
    )


def _call(module: nn.Module, x: Any) -> Any:
    if (
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
        or module._compiled_call_impl is not None
    ):
        return module(x)
    kind = type(module)
    if 'forward' not in module.__dict__:  # no per-instance ``forward`` patch: the class's forward is what runs
        if kind is nn.Sequential:
            for child in module._modules.values():
                x = _call(child, x)
            return x
        inline = _INLINE.get(kind)
        if inline is not None:
            return inline(module, x)
    return module.forward(x)  # what ``module(x)`` runs when nothing observes the call


def fast_call(module: nn.Module, x: Any) -> Any:
    """``module(x)``, with the same result, minus the per-module call overhead when no hook or tracer needs it."""
    if _globally_observed():
        return module(x)
    return _call(module, x)
