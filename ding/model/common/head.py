"""Output heads. Each maps a feature vector to a dict: ``{'logit'}``, ``{'pred'}`` or ``{'mu', 'sigma'}``.

Every head is ``layer_num`` activated hidden layers of width ``hidden_size`` followed by one linear output layer.
``input_size`` (default ``hidden_size``) lets the feature width differ from the head width.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .layers import MLP


def _body(
    input_size: int | None,
    hidden_size: int,
    layer_num: int,
    activation: nn.Module | None,
    norm_type: str | None,
    dropout: float | None = None,
) -> tuple[list[nn.Module], int]:
    """Hidden layers of a head (a flat list, so the head is one Sequential) and the width they output."""
    input_size = hidden_size if input_size is None else input_size
    if layer_num == 0:
        return [], input_size
    mlp = MLP(input_size, hidden_size, hidden_size, layer_num, activation, norm_type, dropout=dropout)
    return (list(mlp) if isinstance(mlp, nn.Sequential) else [mlp]), hidden_size


class DiscreteHead(nn.Module):
    """Features -> one logit (or Q value) per action: ``{'logit': (B, output_size)}``."""

    def __init__(
        self,
        hidden_size: int,
        output_size: int,
        layer_num: int = 1,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
        dropout: float | None = None,
        input_size: int | None = None,
    ) -> None:
        super().__init__()
        body, width = _body(input_size, hidden_size, layer_num, activation, norm_type, dropout)
        self.main = nn.Sequential(*body, nn.Linear(width, output_size))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {'logit': self.main(x)}


class DuelingHead(nn.Module):
    """Dueling Q head: ``Q = V + A - mean(A)``, returned as ``{'logit': Q}``."""

    def __init__(
        self,
        hidden_size: int,
        output_size: int,
        layer_num: int = 1,
        a_layer_num: int | None = None,
        v_layer_num: int | None = None,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
        dropout: float | None = None,
        input_size: int | None = None,
    ) -> None:
        super().__init__()
        a_layer_num = layer_num if a_layer_num is None else a_layer_num
        v_layer_num = layer_num if v_layer_num is None else v_layer_num
        a_body, a_width = _body(input_size, hidden_size, a_layer_num, activation, norm_type, dropout)
        v_body, v_width = _body(input_size, hidden_size, v_layer_num, activation, norm_type, dropout)
        self.A = nn.Sequential(*a_body, nn.Linear(a_width, output_size))
        self.V = nn.Sequential(*v_body, nn.Linear(v_width, 1))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        a = self.A(x)
        v = self.V(x)
        return {'logit': a - a.mean(dim=-1, keepdim=True) + v}


class RegressionHead(nn.Module):
    """Features -> real values ``{'pred'}``; shape (B,) when ``output_size == 1``, else (B, output_size)."""

    def __init__(
        self,
        hidden_size: int,
        output_size: int = 1,
        layer_num: int = 2,
        final_tanh: bool = False,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
        input_size: int | None = None,
    ) -> None:
        super().__init__()
        body, width = _body(input_size, hidden_size, layer_num, activation, norm_type)
        self.main = nn.Sequential(*body, nn.Linear(width, output_size))
        self.final_tanh = final_tanh
        self.output_size = output_size

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.main(x)
        if self.final_tanh:
            x = torch.tanh(x)
        if self.output_size == 1:
            x = x.squeeze(-1)
        return {'pred': x}


class ReparameterizationHead(nn.Module):
    """Gaussian policy head: ``{'mu': (B, A), 'sigma': (B, A)}``.

    ``sigma_type``: ``'fixed'`` (constant ``fixed_sigma_value``), ``'independent'`` (a learned log-sigma per action
    dimension, state independent) or ``'conditioned'`` (a linear layer on the features, log-sigma clamped to
    [-20, 2]). ``bound_type='tanh'`` squashes ``mu`` into (-1, 1).
    """

    sigma_types = ('fixed', 'independent', 'conditioned')
    fixed_log_sigma: torch.Tensor  # a buffer, with sigma_type 'fixed'
    bound_types = (None, 'tanh')

    def __init__(
        self,
        hidden_size: int,
        output_size: int,
        layer_num: int = 2,
        sigma_type: str | None = None,
        fixed_sigma_value: float | None = 1.0,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
        bound_type: str | None = None,
        input_size: int | None = None,
    ) -> None:
        super().__init__()
        if sigma_type not in self.sigma_types:
            raise ValueError(
                f'ReparameterizationHead: sigma_type must be one of {self.sigma_types}, got {sigma_type!r}'
            )
        if bound_type not in self.bound_types:
            raise ValueError(
                f'ReparameterizationHead: bound_type must be one of {self.bound_types}, got {bound_type!r}'
            )
        self.sigma_type = sigma_type
        self.bound_type = bound_type
        body, width = _body(input_size, hidden_size, layer_num, activation, norm_type)
        self.main = nn.Sequential(*body)
        self.mu = nn.Linear(width, output_size)
        if sigma_type == 'fixed':
            if fixed_sigma_value is None:
                raise ValueError("ReparameterizationHead: sigma_type 'fixed' needs a fixed_sigma_value")
            self.register_buffer('fixed_log_sigma', torch.full((1, output_size), math.log(fixed_sigma_value)))
        elif sigma_type == 'independent':
            self.log_sigma_param = nn.Parameter(torch.zeros(1, output_size))
        else:
            self.log_sigma_layer = nn.Linear(width, output_size)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.main(x)
        mu = self.mu(x)
        if self.bound_type == 'tanh':
            mu = torch.tanh(mu)
        if self.sigma_type == 'conditioned':
            log_sigma = torch.clamp(self.log_sigma_layer(x), -20.0, 2.0)
        elif self.sigma_type == 'independent':
            log_sigma = self.log_sigma_param.expand_as(mu)
        else:
            log_sigma = self.fixed_log_sigma.expand_as(mu)
        return {'mu': mu, 'sigma': log_sigma.exp()}


__all__ = ['DiscreteHead', 'DuelingHead', 'RegressionHead', 'ReparameterizationHead']
