"""Helpers shared by the concrete policies: config defaults, batching observations, transition fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from ding.torch_utils import Adam

# Layers that compute differently in train and eval mode (batch statistics, random dropping).
MODE_DEPENDENT_LAYERS: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.LazyBatchNorm1d,
    nn.LazyBatchNorm2d,
    nn.LazyBatchNorm3d,
    nn.SyncBatchNorm,
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def has_mode_dependent_layers(model: nn.Module) -> bool:
    """True when ``model`` holds a layer whose output depends on ``train()`` / ``eval()`` (then acting and
    evaluating switch the model to eval mode and back; otherwise the switch is skipped)."""
    return any(isinstance(m, MODE_DEPENDENT_LAYERS) for m in model.modules())


def stack_obs(obs_list: list[Any], device: torch.device) -> torch.Tensor:
    """One batched float tensor from per-env observations (numpy arrays or tensors)."""
    first = obs_list[0]
    if isinstance(first, torch.Tensor):
        obs = torch.stack(obs_list)
    else:
        obs = torch.from_numpy(np.stack(obs_list))
    if obs.dtype != torch.float32:
        obs = obs.float()
    return obs if device.type == 'cpu' else obs.to(device)


def obs_to_tensor(obs: Any) -> torch.Tensor:
    """A float32 tensor that owns its memory (env managers may reuse observation buffers)."""
    if isinstance(obs, torch.Tensor):
        return obs if obs.dtype == torch.float32 else obs.float()
    # np.array copies and converts in one step: the same values as torch.tensor(obs, dtype=float32), several
    # times cheaper (this runs twice per env step)
    return torch.from_numpy(np.array(obs, dtype=np.float32))


def reward_to_tensor(reward: Any) -> torch.Tensor:
    """A 0-d float32 tensor from a python number, a (1,) array or a tensor."""
    if hasattr(reward, 'item'):
        reward = reward.item()
    return torch.scalar_tensor(float(reward), dtype=torch.float32)  # cheaper than torch.tensor for one number


def terminated(timestep: Any) -> bool:
    """True when the episode really ended: ``done`` and not a time-limit truncation (which must bootstrap)."""
    if not timestep.done:
        return False
    info = timestep.info
    return not (isinstance(info, Mapping) and info.get('TimeLimit.truncated', False))


def check_unroll_len(cfg: Mapping, policy_name: str) -> None:
    unroll_len = cfg.get('collect', {}).get('unroll_len', 1)
    if unroll_len != 1:
        raise NotImplementedError(
            f'{policy_name}: policy.collect.unroll_len={unroll_len} is not supported (non-recurrent model; use 1)'
        )


def build_adam(params, lr: float, **kwargs: Any) -> torch.optim.Adam:
    """Adam (``ding.torch_utils.Adam``), using the fused kernel where this torch build has it for the parameters'
    device: same numbers, several times less per-step overhead for small networks."""
    params = list(params)
    try:
        return Adam(params, lr=lr, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return Adam(params, lr=lr, **kwargs)
