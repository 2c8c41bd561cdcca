"""Small building blocks shared by encoders and heads: activation/normalisation lookup and MLPs."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch.nn as nn

_NORMS = {
    'BN': nn.BatchNorm1d,
    'LN': nn.LayerNorm,
}

_ACTIVATIONS = {
    'relu': nn.ReLU,
    'tanh': nn.Tanh,
    'sigmoid': nn.Sigmoid,
    'elu': nn.ELU,
    'gelu': nn.GELU,
    'silu': nn.SiLU,
    'swish': nn.SiLU,
    'leaky_relu': nn.LeakyReLU,
}


def build_activation(activation: None | str | nn.Module) -> nn.Module:
    """Return a fresh activation module from a module instance, a name like ``'relu'`` or ``None`` (ReLU)."""
    if activation is None:
        return nn.ReLU()
    if isinstance(activation, str):
        key = activation.lower()
        if key not in _ACTIVATIONS:
            raise ValueError(f"model activation: unknown name '{activation}'; known: {sorted(_ACTIVATIONS)}")
        return _ACTIVATIONS[key]()
    if isinstance(activation, nn.Module):
        # A copy so that modules never share one activation instance (harmless today, matters for stateful ones).
        return copy.deepcopy(activation)
    raise TypeError(f'model activation: expected None, a name or an nn.Module, got {type(activation).__name__}')


def build_normalization(norm_type: str | None, dim: int) -> nn.Module | None:
    """``'BN'`` -> BatchNorm1d, ``'LN'`` -> LayerNorm, ``None`` -> no normalisation."""
    if norm_type is None:
        return None
    if norm_type not in _NORMS:
        raise ValueError(f"model norm_type: unknown '{norm_type}'; known: {sorted(_NORMS)} or None")
    return _NORMS[norm_type](dim)


def fc_block(
    in_channels: int,
    out_channels: int,
    activation: nn.Module | None = None,
    norm_type: str | None = None,
    dropout: float | None = None,
) -> nn.Sequential:
    """Linear -> (norm) -> (activation) -> (dropout)."""
    layers: list[nn.Module] = [nn.Linear(in_channels, out_channels)]
    norm = build_normalization(norm_type, out_channels)
    if norm is not None:
        layers.append(norm)
    if activation is not None:
        layers.append(build_activation(activation))
    if dropout:
        layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


def MLP(
    in_channels: int,
    hidden_channels: int,
    out_channels: int,
    layer_num: int,
    activation: nn.Module | None = None,
    norm_type: str | None = None,
    last_linear_layer_init_zero: bool = False,
    dropout: float | None = None,
) -> nn.Module:
    """``layer_num`` activated fc blocks: in -> hidden -> ... -> out. ``layer_num=0`` is the identity.

    Every block (the last one too) carries the activation, as DI-engine's ``MLP`` does when used inside heads.
    """
    if layer_num < 0:
        raise ValueError(f'MLP layer_num must be >= 0, got {layer_num}')
    if layer_num == 0:
        if in_channels != out_channels:
            raise ValueError(
                f'MLP with layer_num=0 needs in_channels == out_channels, got {in_channels} != {out_channels}'
            )
        return nn.Identity()
    act = build_activation(activation)
    sizes = [in_channels] + [hidden_channels] * (layer_num - 1) + [out_channels]
    # One flat Sequential: nested containers cost a Python call each on every forward.
    layers: list[nn.Module] = []
    for i in range(layer_num):
        layers.extend(fc_block(sizes[i], sizes[i + 1], act, norm_type, dropout))
    if last_linear_layer_init_zero:
        last = [m for m in layers if isinstance(m, nn.Linear)][-1]
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
    return nn.Sequential(*layers)


def squeeze_shape(shape: int | Sequence[int], name: str) -> int | tuple[int, ...]:
    """An int for 1-D shapes (``4``, ``[4]``, ``(4,)``), a tuple otherwise."""
    if isinstance(shape, int):
        return shape
    try:
        dims = tuple(int(s) for s in shape)
    except TypeError as e:
        raise TypeError(f'model {name}: expected an int or a sequence of ints, got {shape!r}') from e
    if len(dims) == 0:
        raise ValueError(f'model {name}: empty shape')
    return dims[0] if len(dims) == 1 else dims
