"""Value rescaling (Pohlen et al. 2018, used by R2D2): ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x`` squashes
large returns so one network can fit values of very different scales; ``h^-1`` undoes it exactly."""

from __future__ import annotations

import torch


def value_transform(x: torch.Tensor, eps: float = 1e-2) -> torch.Tensor:
    """``h(x)``: odd, increasing, roughly ``sqrt`` for large ``|x|`` and ``(1/2 + eps) x`` near 0."""
    return torch.sign(x) * (torch.sqrt(torch.abs(x) + 1) - 1) + eps * x


def value_inv_transform(x: torch.Tensor, eps: float = 1e-2) -> torch.Tensor:
    """``h^-1(x)``, the closed form of the inverse of ``value_transform`` (a quadratic in ``sqrt(|y| + 1)``)."""
    root = torch.sqrt(1 + 4 * eps * (torch.abs(x) + 1 + eps))
    return torch.sign(x) * (((root - 1) / (2 * eps)) ** 2 - 1)
