"""Observation encoders: ``FCEncoder`` for vector observations, ``ConvEncoder`` for images (C, H, W)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from .layers import build_activation, fc_block

# Nature CNN (Mnih et al. 2015): 32 / 64 / 64 conv channels (kernels 8 / 4 / 3, strides 4 / 2 / 1, ConvEncoder's
# defaults) then a 512-wide linear layer; the encoder of [4, 84, 84] Atari frames.
NATURE_CNN_SIZES = (32, 64, 64, 512)


class FCEncoder(nn.Module):
    """An MLP: obs -> hidden_size_list[0] -> ... -> hidden_size_list[-1], every layer activated.

    ``res_block=True`` turns each hidden -> hidden layer into a residual block (same width needed).
    """

    def __init__(
        self,
        obs_shape: int,
        hidden_size_list: Sequence[int],
        res_block: bool = False,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
        dropout: float | None = None,
    ) -> None:
        super().__init__()
        if not hidden_size_list:
            raise ValueError('FCEncoder: encoder_hidden_size_list must name at least one layer size')
        self.obs_shape = obs_shape
        self.output_size = int(hidden_size_list[-1])
        act = build_activation(activation)
        # A single flat Sequential keeps the per-forward Python overhead low (this runs on every env step).
        layers: list[nn.Module] = list(fc_block(obs_shape, hidden_size_list[0], act, norm_type, dropout))
        for i in range(len(hidden_size_list) - 1):
            block = fc_block(hidden_size_list[i], hidden_size_list[i + 1], act, norm_type, dropout)
            if res_block:
                if hidden_size_list[i] != hidden_size_list[i + 1]:
                    raise ValueError(
                        'FCEncoder: res_block needs equal sizes in encoder_hidden_size_list, '
                        f'got {list(hidden_size_list)}'
                    )
                layers.append(_Residual(block))
            else:
                layers.extend(block)
        self.main = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x)


class _Residual(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ConvEncoder(nn.Module):
    """Conv stack over ``hidden_size_list[:-1]`` channels, then a linear layer to ``hidden_size_list[-1]``."""

    def __init__(
        self,
        obs_shape: Sequence[int],
        hidden_size_list: Sequence[int] = (32, 64, 64, 128),
        activation: nn.Module | None = nn.ReLU(),
        kernel_size: Sequence[int] = (8, 4, 3),
        stride: Sequence[int] = (4, 2, 1),
        padding: Sequence[int] | None = None,
        norm_type: str | None = None,
    ) -> None:
        super().__init__()
        obs_shape = tuple(obs_shape)
        if len(obs_shape) != 3:
            raise ValueError(f'ConvEncoder: obs_shape must be (C, H, W), got {obs_shape}')
        n_conv = len(hidden_size_list) - 1
        if n_conv < 1 or len(kernel_size) < n_conv or len(stride) < n_conv:
            raise ValueError(
                f'ConvEncoder: hidden_size_list {list(hidden_size_list)} needs {n_conv} kernel sizes '
                f'and strides, got kernel_size={list(kernel_size)}, stride={list(stride)}'
            )
        padding = list(padding) if padding is not None else [0] * n_conv
        self.obs_shape = obs_shape
        self.output_size = int(hidden_size_list[-1])
        layers: list[nn.Module] = []
        in_ch = obs_shape[0]
        for i in range(n_conv):
            layers.append(nn.Conv2d(in_ch, hidden_size_list[i], kernel_size[i], stride[i], padding[i]))
            if norm_type == 'BN':
                layers.append(nn.BatchNorm2d(hidden_size_list[i]))
            elif norm_type is not None:
                raise ValueError(f"ConvEncoder: norm_type must be 'BN' or None, got {norm_type!r}")
            layers.append(build_activation(activation))
            in_ch = hidden_size_list[i]
        layers.append(nn.Flatten())
        self.main = nn.Sequential(*layers)
        with torch.no_grad():
            flat = self.main(torch.zeros(1, *obs_shape)).shape[1]
        self.mid = fc_block(flat, self.output_size, activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:  # frames kept as bytes (Atari): scaled to [0, 1] here
            x = x.float().mul_(1.0 / 255.0)
        return self.mid(self.main(x))


def build_encoder(
    obs_shape: int | Sequence[int],
    hidden_size_list: Sequence[int] | None,
    activation: nn.Module | None = nn.ReLU(),
    norm_type: str | None = None,
    vector_sizes: Sequence[int] = (128, 128, 64),
) -> FCEncoder | ConvEncoder:
    """FCEncoder for an int / 1-D obs_shape, ConvEncoder for a 3-D one. ``hidden_size_list=None`` picks the
    Nature CNN (``NATURE_CNN_SIZES``) for images and ``vector_sizes`` for vectors."""
    if isinstance(obs_shape, int):
        sizes = vector_sizes if hidden_size_list is None else hidden_size_list
        return FCEncoder(obs_shape, list(sizes), activation=activation, norm_type=norm_type)
    if len(obs_shape) == 3:
        sizes = NATURE_CNN_SIZES if hidden_size_list is None else hidden_size_list
        return ConvEncoder(obs_shape, list(sizes), activation=activation, norm_type=norm_type)
    raise ValueError(f'model obs_shape: expected an int or (C, H, W), got {obs_shape!r}')
