"""Turn trajectories (lists of transition dicts) into training samples."""

from __future__ import annotations

from typing import Any

import torch


def get_nstep_return_data(data: list[dict[str, Any]], nstep: int, gamma: float) -> list[dict[str, Any]]:
    """n-step samples from one trajectory segment of transitions ``{obs, next_obs, action, reward, done, ...}``.

    Sample ``i`` gets ``reward``: the (nstep,) rewards ``r_i .. r_{i+k-1}`` zero-padded, ``next_obs``/``done`` of
    the transition ``k`` steps ahead and ``value_gamma = gamma ** k``, where ``k <= nstep`` stops early at a
    terminal transition (``done``) or at the end of the segment. So a segment that was cut or truncated (last
    ``done`` False) still bootstraps from its last ``next_obs`` with the right discount, and a terminated one
    does not bootstrap. ``done`` must mean "terminated" (a time-limit truncation stores False).
    ``nstep == 1`` returns the transitions themselves.
    """
    if nstep < 1:
        raise ValueError(f'n-step samples: nstep must be >= 1, got {nstep}')
    if nstep == 1:
        return data
    rewards = [torch.as_tensor(t['reward'], dtype=torch.float32).reshape(()) for t in data]
    zero = torch.zeros(())
    T = len(data)
    out = []
    for i in range(T):
        j = i  # index of the last real step inside the window
        while j - i + 1 < nstep and j + 1 < T and not data[j]['done']:
            j += 1
        k = j - i + 1
        sample = dict(data[i])
        sample['reward'] = torch.stack(rewards[i : j + 1] + [zero] * (nstep - k))
        sample['next_obs'] = data[j]['next_obs']
        sample['done'] = data[j]['done']
        sample['value_gamma'] = torch.tensor(gamma**k, dtype=torch.float32)
        out.append(sample)
    return out


def get_train_sample(data: list[dict[str, Any]], unroll_len: int) -> list[dict[str, Any]]:
    """Samples for non-recurrent policies: ``unroll_len`` must be 1 (each transition is one sample)."""
    if unroll_len != 1:
        raise NotImplementedError(
            f'collect.unroll_len={unroll_len}: only unroll_len=1 (non-recurrent models) is supported'
        )
    return data
