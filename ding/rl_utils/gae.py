"""Generalized Advantage Estimation."""

from __future__ import annotations

from collections import namedtuple

import torch

from .scan import reverse_scan

gae_data = namedtuple('gae_data', ['value', 'next_value', 'reward', 'done', 'traj_flag'])


def gae(data: gae_data, gamma: float = 0.99, lambda_: float = 0.97) -> torch.Tensor:
    """Advantages ``A_t = delta_t + gamma * lambda * (1 - traj_flag_t) * A_{t+1}``.

    ``delta_t = r_t + gamma * (1 - done_t) * next_value_t - value_t``. All inputs are time-major, (T,) or (T, B).
    ``done`` marks real terminations (no bootstrap); ``traj_flag`` marks where a trajectory segment ends (done,
    truncated or cut: the advantage recursion stops there, the bootstrap value ``next_value`` still counts unless
    done). ``traj_flag=None`` means ``traj_flag = done``. No gradient flows through the result.
    """
    value, next_value, reward, done, traj_flag = data
    if traj_flag is None:
        traj_flag = done
    if not (value.shape == next_value.shape == reward.shape == done.shape == traj_flag.shape):
        raise ValueError(
            'gae: value, next_value, reward, done and traj_flag must share one shape, got '
            f'{[tuple(x.shape) for x in (value, next_value, reward, done, traj_flag)]}'
        )
    with torch.no_grad():
        dtype = value.dtype if value.is_floating_point() else torch.float32
        not_done = 1.0 - done.to(dtype)
        delta = reward.to(dtype) + gamma * not_done * next_value.to(dtype) - value.to(dtype)
        factor = gamma * lambda_ * (1.0 - traj_flag.to(dtype))
        return reverse_scan(delta, factor)
