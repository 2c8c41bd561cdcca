"""Turn trajectories (lists of transition dicts) into training samples."""

from __future__ import annotations

from typing import Any

import torch


def nstep_window(data: list[dict[str, Any]], i: int, nstep: int) -> int:
    """How many real steps ``k <= nstep`` the n-step window starting at transition ``i`` holds: it stops early
    at a terminal transition (``done``) or at the end of ``data``."""
    j = i  # index of the last real step inside the window
    while j - i + 1 < nstep and j + 1 < len(data) and not data[j]['done']:
        j += 1
    return j - i + 1


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
    out = []
    for i in range(len(data)):
        k = nstep_window(data, i, nstep)
        j = i + k - 1
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


def get_sequence_train_sample(
    data: list[dict[str, Any]], burnin_step: int, learn_unroll_len: int, nstep: int, gamma: float
) -> list[dict[str, Any]]:
    """Fixed-length sequence samples for recurrent Q-learning (R2D2) from one trajectory segment.

    Transitions are ``{obs, next_obs, action, reward, done, prev_state}``, ``prev_state`` being the recurrent
    state the actor had before acting on ``obs``. Sequence ``m`` trains on steps ``[m U, m U + U)``
    (``U = learn_unroll_len``: each step is trained in exactly one sequence), preceded by up to ``burnin_step``
    earlier steps to burn in and followed by ``nstep`` observations for the bootstrap. Each sample holds:

    - ``obs`` (burnin_step + U + nstep, ...): the observations from ``m U - burnin_step`` on; the segment's last
      ``next_obs`` follows its last ``obs``; positions outside the segment are zeros;
    - ``burnin_mask`` (burnin_step,): False where the burn-in reaches before the segment's start (left padding:
      the burn-in must skip those steps);
    - ``prev_state``: the state before the first real observation of the sample;
    - per trained step (U,): ``action``, ``reward`` (U, nstep; zero-padded), ``done`` (the n-step window ended
      in a termination), ``value_gamma`` (``gamma ** k``), ``bootstrap_step`` (``k``: the bootstrap value is
      read at trained position ``t + k``) and ``mask`` (False on the padding after the segment's end).

    ``collect_iter`` and ``env_id`` of the sequence's first trained transition are kept for the buffer.
    """
    if burnin_step < 0 or learn_unroll_len < 1 or nstep < 1:
        raise ValueError(
            f'sequence samples: need burnin_step >= 0, learn_unroll_len >= 1, nstep >= 1; got {burnin_step}, '
            f'{learn_unroll_len}, {nstep}'
        )
    if not data:
        return []
    length = len(data)
    obs = [torch.as_tensor(t['obs']) for t in data] + [torch.as_tensor(data[-1]['next_obs'])]
    zero_obs = torch.zeros_like(obs[0])
    rewards = torch.stack([torch.as_tensor(t['reward'], dtype=torch.float32).reshape(()) for t in data])
    windows = [nstep_window(data, i, nstep) for i in range(length)]
    samples = []
    for start in range(0, length, learn_unroll_len):
        first = start - burnin_step
        positions = range(first, start + learn_unroll_len + nstep)
        seq_obs = torch.stack([obs[p] if 0 <= p <= length else zero_obs for p in positions])
        action = torch.zeros(learn_unroll_len, dtype=torch.long)
        reward = torch.zeros(learn_unroll_len, nstep)
        done = torch.zeros(learn_unroll_len, dtype=torch.bool)
        value_gamma = torch.ones(learn_unroll_len)
        bootstrap_step = torch.ones(learn_unroll_len, dtype=torch.long)
        mask = torch.zeros(learn_unroll_len, dtype=torch.bool)
        for t, i in enumerate(range(start, min(start + learn_unroll_len, length))):
            k = windows[i]
            action[t] = int(torch.as_tensor(data[i]['action']).reshape(()))
            reward[t, :k] = rewards[i : i + k]
            done[t] = bool(data[i + k - 1]['done'])
            value_gamma[t] = gamma**k
            bootstrap_step[t] = k
            mask[t] = True
        samples.append(
            {
                'obs': seq_obs,
                'burnin_mask': torch.tensor([p >= 0 for p in range(first, start)], dtype=torch.bool),
                'prev_state': data[max(first, 0)]['prev_state'],
                'action': action,
                'reward': reward,
                'done': done,
                'value_gamma': value_gamma,
                'bootstrap_step': bootstrap_step,
                'mask': mask,
                'collect_iter': data[start].get('collect_iter', 0),
                'env_id': data[start].get('env_id', 0),
            }
        )
    return samples
