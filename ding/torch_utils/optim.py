"""Optimizers that keep torch's compiler stack off the start path of eager training.

torch 2.x wraps several ``torch.optim`` methods so that they import ``torch._dynamo`` on first use
(about 1.5 s of CPU). Eager training never compiles, so ``ding.torch_utils.Adam`` runs torch's own
Adam update without that import. As soon as ``torch._dynamo`` is loaded by anyone (a user calling
``torch.compile``), every call goes through torch's original wrappers again. Set
``DING_TORCH_DYNAMO=1`` to always use torch's path. State dicts are torch's, unchanged.

Small networks also pay for Python around each step (torch's profiler/hook wrapper, ``_init_group``, per-device
grouping) about as much as for the fused update itself; ``Adam`` skips what nothing observes and calls the same
fused kernel on the same tensors, so the numbers stay torch's bit for bit.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.optim import optimizer as _optim_impl


class _DisableWhenCompiling:
    """Stands in for torch's lazily built dynamo-disable wrapper of one function."""

    def __init__(self, fn: Callable) -> None:
        self._fn = fn
        self._real: Callable | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._real is None:
            dynamo = sys.modules.get('torch._dynamo')
            if dynamo is None:  # nothing is being compiled: disabling the compiler is moot
                return self._fn(*args, **kwargs)
            self._real = dynamo.disable(self._fn, True, wrapping=False)
        return self._real(*args, **kwargs)


def _dynamo_wanted() -> bool:
    return 'torch._dynamo' in sys.modules or os.environ.get('DING_TORCH_DYNAMO') == '1'


def avoid_dynamo_import() -> None:
    """Pre-resolve the dynamo-disable wrappers that an eager Adam touches (idempotent)."""
    if _dynamo_wanted():
        return
    from torch.optim import Optimizer, adam

    targets = [
        getattr(Optimizer, name, None) for name in ('add_param_group', 'zero_grad', 'state_dict', 'load_state_dict')
    ]
    targets.append(getattr(adam, 'adam', None))
    for wrapper in targets:
        fn = getattr(wrapper, '__wrapped__', None)
        # torch looks the resolved wrapper up under this exact attribute name (no name mangling)
        if fn is not None and getattr(fn, '__dynamo_disable', None) is None:
            setattr(fn, '__dynamo_disable', _DisableWhenCompiling(fn))


_RAW_ADAM_STEP = inspect.unwrap(torch.optim.Adam.step)


def _observed(opt: torch.optim.Optimizer) -> bool:
    """Step hooks or a running profiler need torch's step wrapper (hook calls, ``record_function`` scopes)."""
    return bool(
        opt._optimizer_step_pre_hooks
        or opt._optimizer_step_post_hooks
        or _optim_impl._global_optimizer_pre_hooks
        or _optim_impl._global_optimizer_post_hooks
        or torch.autograd._profiler_enabled()
    )


def _fused_group_args(opt: torch.optim.Optimizer, group: dict[str, Any]) -> tuple[list[torch.Tensor], ...] | None:
    """The tensor lists torch's fused Adam hands its kernel for ``group``, or None when this step needs torch's
    general path: first step (state not created yet), a parameter without gradient, a sparse gradient, mixed
    devices / dtypes, amsgrad, tensor hyper-parameters, AMP's grad scaling, capturable / differentiable mode."""
    if (
        not group['fused']
        or group['amsgrad']
        or group['capturable']
        or group['differentiable']
        or group.get('decoupled_weight_decay', False)
        or isinstance(group['lr'], torch.Tensor)
        or getattr(opt, 'grad_scale', None) is not None
        or getattr(opt, 'found_inf', None) is not None
    ):
        return None
    params = group['params']
    if not params:
        return None
    grads, exp_avgs, exp_avg_sqs, steps = [], [], [], []
    device, dtype = params[0].device, params[0].dtype
    state = opt.state
    for p in params:
        g = p.grad
        s = state.get(p)
        if g is None or g.is_sparse or not s or p.device != device or p.dtype != dtype:
            return None
        grads.append(g)
        exp_avgs.append(s['exp_avg'])
        exp_avg_sqs.append(s['exp_avg_sq'])
        steps.append(s['step'])
    if dtype.is_complex:
        return None
    return params, grads, exp_avgs, exp_avg_sqs, steps


def _adam_step(opt: torch.optim.Optimizer, closure: Callable[[], Any] | None) -> Any:
    """torch's eager Adam step. When every group qualifies for the fused kernel, it is called directly with the
    argument lists torch's ``_fused_adam`` would build (single device and dtype, so one kernel call per group,
    parameters in order): the same kernel on the same tensors, hence the same numbers, minus ~50 us of Python
    per step spent in ``_init_group`` and the per-device grouping."""
    if closure is not None:
        return _RAW_ADAM_STEP(opt, closure)
    args = [_fused_group_args(opt, group) for group in opt.param_groups]
    if any(a is None for a in args):
        return _RAW_ADAM_STEP(opt, None)
    for group, (params, grads, exp_avgs, exp_avg_sqs, steps) in zip(opt.param_groups, args):
        beta1, beta2 = group['betas']
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            [],
            steps,
            amsgrad=False,
            lr=group['lr'],
            beta1=float(beta1),
            beta2=float(beta2),
            weight_decay=group['weight_decay'],
            eps=group['eps'],
            maximize=group['maximize'],
            grad_scale=None,
            found_inf=None,
        )
    return None


def _eager_step(self: Adam, closure: Callable[[], Any] | None = None) -> Any:
    if _dynamo_wanted() or self.defaults.get('differentiable', False):
        return _TORCH_ADAM_STEP(self, closure)
    with torch.no_grad():
        return _adam_step(self, closure)


# torch.optim.Adam's own step (for the compiler path) without the profiler/hook wrapper torch may have put on it:
# _HOOKED_STEP already provides that wrapper.
_TORCH_ADAM_STEP = (
    torch.optim.Adam.step.__wrapped__ if getattr(torch.optim.Adam.step, 'hooked', False) else torch.optim.Adam.step
)
# torch's wrapper (profiler scope, optimizer step hooks) around our step, for the steps that need it.
_HOOKED_STEP = torch.optim.Optimizer.profile_hook_step(_eager_step)


class Adam(torch.optim.Adam):
    """``torch.optim.Adam`` with the same maths and state dict, minus the compiler import when eager, and with
    less Python per step and per ``zero_grad`` for small networks (see ``_adam_step``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        avoid_dynamo_import()
        super().__init__(*args, **kwargs)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        if _observed(self):
            return _HOOKED_STEP(self, closure)
        return _eager_step(self, closure)

    # torch wraps an optimizer class's ``step`` in its hook/profiler wrapper unless it is marked as done; this
    # ``step`` runs that wrapper itself whenever hooks or a profiler are there to see it.
    step.hooked = True  # type: ignore[attr-defined]

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none or torch.autograd._profiler_enabled():
            return super().zero_grad(set_to_none)
        # torch's zero_grad minus its profiler scope (~15 us per call)
        for group in self.param_groups:
            for p in group['params']:
                p.grad = None
