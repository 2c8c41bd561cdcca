"""``WeightLoader``: loads published weights into a model that receives a new copy every few milliseconds (an
actor thread's, an evaluator's).

``load_state_dict`` walks the module tree and checks every key on each call (~110 us for CartPole's IMPALA
net); once the keys are known to match, one ``torch._foreach_copy_`` over the same tensors does the copy (~10 us
with the shape check). The copies are in place, so whatever views the parameters (a ``NumpyChain``) sees the
new weights.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch


class WeightLoader:
    """``load(weights)`` copies a state dict into ``model``: the first time (or when the keys change) through
    ``load_state_dict`` and its checks, afterwards straight into the same tensors."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._keys: list[str] | None = None
        self._targets: list[torch.Tensor] = []

    def load(self, weights: Mapping[str, torch.Tensor]) -> None:
        keys, values = list(weights), list(weights.values())
        # copy_ broadcasts: a tensor of another shape must take the checked path, which names its key
        if keys != self._keys or any(v.shape != t.shape for v, t in zip(values, self._targets)):
            self.model.load_state_dict(weights)  # strict: names and shapes checked here
            own = self.model.state_dict(keep_vars=True)
            self._targets = [own[key] for key in keys]
            self._keys = keys
            return
        with torch.no_grad():
            torch._foreach_copy_(self._targets, values)


__all__ = ['WeightLoader']
