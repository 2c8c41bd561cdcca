"""Optimizers that keep torch's compiler stack off the start path of eager training.

torch 2.x wraps several ``torch.optim`` methods so that they import ``torch._dynamo`` on first use
(about 1.5 s of CPU). Eager training never compiles, so ``ding.torch_utils.Adam`` runs torch's own
Adam update without that import. As soon as ``torch._dynamo`` is loaded by anyone (a user calling
``torch.compile``), every call goes through torch's original wrappers again. Set
``DING_TORCH_DYNAMO=1`` to always use torch's path. State dicts are torch's, unchanged.
"""
from __future__ import annotations

import inspect
import os
import sys
from typing import Any, Callable, Optional

import torch


class _DisableWhenCompiling:
    """Stands in for torch's lazily built dynamo-disable wrapper of one function."""

    def __init__(self, fn: Callable) -> None:
        self._fn = fn
        self._real: Optional[Callable] = None

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
    targets = [getattr(Optimizer, name, None) for name in ('add_param_group', 'zero_grad', 'state_dict',
                                                            'load_state_dict')]
    targets.append(getattr(adam, 'adam', None))
    for wrapper in targets:
        fn = getattr(wrapper, '__wrapped__', None)
        # torch looks the resolved wrapper up under this exact attribute name (no name mangling)
        if fn is not None and getattr(fn, '__dynamo_disable', None) is None:
            setattr(fn, '__dynamo_disable', _DisableWhenCompiling(fn))


_RAW_ADAM_STEP = inspect.unwrap(torch.optim.Adam.step)


class Adam(torch.optim.Adam):
    """``torch.optim.Adam`` with the same maths and state dict, minus the compiler import when eager."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        avoid_dynamo_import()
        super().__init__(*args, **kwargs)

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:  # type: ignore[override]
        if _dynamo_wanted() or self.defaults.get('differentiable', False):
            return super().step(closure)
        with torch.no_grad():
            return _RAW_ADAM_STEP(self, closure)
