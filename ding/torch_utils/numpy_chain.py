"""``NumpyChain``: a small module that is a chain of ``Linear`` / ReLU / tanh layers (optionally ending in an argmax
over the last dim), run in numpy.

Actors call such a network once per env step on a few observations, where torch's per-op dispatch costs several
times the arithmetic: on CartPole's 4-64-64-64-2 actor for 16 envs a torch forward takes ~40 us, the numpy chain
~10 us (benchmarks/NOTES.md). The weights are numpy views of the module's parameters, so in-place writes
(``load_state_dict``, ``param.copy_``) reach the chain without a rebuild.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

LINEAR, RELU, TANH, ARGMAX = 'linear', 'relu', 'tanh', 'argmax'


class NumpyChain:
    """``__call__(x [..., in], out=None)``: the chain on a batch (or one vector) of float32 inputs.

    ``out`` (float32, the output's shape) receives the last linear layer's output and the activations after it,
    e.g. a row of a trajectory buffer, so nothing is copied; a chain ending in argmax returns the indices.
    Build one with :meth:`trace`.
    """

    def __init__(self, layers: list[tuple[str, np.ndarray | None, np.ndarray | None]]) -> None:
        self._layers = layers
        self.ends_in_argmax = bool(layers) and layers[-1][0] == ARGMAX
        self._last_linear = max((i for i, (kind, _, _) in enumerate(layers) if kind == LINEAR), default=-1)

    @classmethod
    def trace(cls, module: torch.nn.Module, example: torch.Tensor) -> NumpyChain | None:
        """The chain computing ``module(x)``, or None when ``torch.fx`` cannot trace the module, the traced graph
        is anything but such a chain, or the chain disagrees with ``module`` on ``example`` (float32 inputs)."""
        try:
            traced = torch.fx.symbolic_trace(module)
        except Exception:  # any module fx cannot trace keeps the torch path
            return None
        traced.graph.eliminate_dead_code()
        layers: list[tuple[str, np.ndarray | None, np.ndarray | None]] = []
        previous = None
        for node in traced.graph.nodes:
            if node.op == 'placeholder':
                if previous is not None:
                    return None  # more than one input
                previous = node
                continue
            if node.op == 'output':
                if node.args[0] is not previous:
                    return None
                break
            if not node.args or node.args[0] is not previous or (layers and layers[-1][0] == ARGMAX):
                return None  # not a chain, or something after the argmax
            layer = _layer(traced, node)
            if layer is None:
                return None
            layers.append(layer)
            previous = node
        if not layers:
            return None
        chain = cls(layers)
        return chain if chain.agrees_with(module, example) else None

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> Any:
        owned = False  # whether x is an array of ours (the caller's input is never written)
        for i, (kind, weight_t, bias) in enumerate(self._layers):
            if kind == LINEAR:
                assert weight_t is not None
                x = np.matmul(x, weight_t, out=out) if out is not None and i == self._last_linear else x @ weight_t
                owned = True
                if bias is not None:
                    x += bias
            elif kind == RELU:
                x = np.maximum(x, 0.0, out=x) if owned else np.maximum(x, 0.0)
                owned = True
            elif kind == TANH:
                x = np.tanh(x, out=x) if owned else np.tanh(x)
                owned = True
            else:
                return np.argmax(x, axis=-1)
        return x

    def agrees_with(self, module: torch.nn.Module, example: torch.Tensor) -> bool:
        """The chain gives ``module``'s output on ``example`` (to float32 rounding; argmax indices exactly)."""
        with torch.no_grad():
            expected = module(example).numpy()
        got = self(example.numpy())
        if got.shape != expected.shape:
            return False
        if self.ends_in_argmax:
            return bool(np.array_equal(got, expected))
        return bool(np.allclose(got, expected, rtol=1e-4, atol=1e-5))


def _layer(
    traced: torch.fx.GraphModule, node: torch.fx.Node
) -> tuple[str, np.ndarray | None, np.ndarray | None] | None:
    if node.op == 'call_module':
        module = traced.get_submodule(str(node.target))
        if isinstance(module, torch.nn.Linear):
            # ``weight.T`` is a view: an in-place write to the parameter shows through it.
            weight_t = module.weight.detach().numpy().T
            bias = None if module.bias is None else module.bias.detach().numpy()
            return LINEAR, weight_t, bias
        if isinstance(module, torch.nn.ReLU):
            return RELU, None, None
        if isinstance(module, torch.nn.Tanh):
            return TANH, None, None
        return None
    if node.op in ('call_function', 'call_method'):
        if node.target in (torch.tanh, 'tanh'):
            return TANH, None, None
        if node.target in (torch.relu, 'relu'):
            return RELU, None, None
        if node.target in (torch.argmax, 'argmax') and tuple(node.args[1:]) + tuple(node.kwargs.values()) == (-1,):
            return ARGMAX, None, None
    return None


__all__ = ['NumpyChain']
