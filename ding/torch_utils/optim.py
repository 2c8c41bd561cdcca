"""Optimizers under DI-engine's names (``ding.torch_utils.Adam``)."""

from __future__ import annotations

from torch.optim import Adam

__all__ = ['Adam']
