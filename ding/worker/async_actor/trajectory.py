"""Where an actor writes its unrolls: preallocated time-major tensors (see ``protocol`` for the layout),
recycled once the learner has copied them into a batch, and the joining of unrolls into a learner batch."""

from __future__ import annotations

import queue
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .protocol import TENSOR_KEYS

ALL = slice(None)  # every env of the buffer


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


class TrajectoryBuffer:
    """One unroll of ``unroll_len`` steps of ``num_envs`` envs, in tensors allocated once.

    The actor's env groups fill step ``t`` of their columns ``cols`` (a slice of the env dim) with
    :meth:`write_obs` and :meth:`write_step`; ``tensors`` maps each key of ``TENSOR_KEYS`` to its tensor.
    With ``allocate_per_step`` every write makes new tensors instead, joined by :meth:`finish` (the slow way,
    kept to measure what preallocation buys; see benchmarks/).
    """

    def __init__(
        self,
        unroll_len: int,
        num_envs: int,
        obs_shape: Sequence[int],
        obs_dtype: np.dtype,
        action_num: int,
        allocate_per_step: bool = False,
    ) -> None:
        self.unroll_len = unroll_len
        self.num_envs = num_envs
        self.allocate_per_step = allocate_per_step
        self.action_num = action_num
        t, b = unroll_len, num_envs
        self.tensors: dict[str, torch.Tensor] = {
            'obs': torch.zeros((t + 1, b, *obs_shape), dtype=_torch_dtype(np.dtype(obs_dtype))),
            'action': torch.zeros((t, b), dtype=torch.int64),
            'logit': torch.zeros((t, b, action_num), dtype=torch.float32),
            'reward': torch.zeros((t, b), dtype=torch.float32),
            'done': torch.zeros((t, b), dtype=torch.bool),
            'truncated': torch.zeros((t, b), dtype=torch.bool),
            'mask': torch.zeros((t, b), dtype=torch.float32),
            'first': torch.zeros((t + 1, b), dtype=torch.bool),
        }
        # numpy views of the same memory: writing through them costs a fraction of torch's indexing and copy_
        self._arrays = {key: tensor.numpy() for key, tensor in self.tensors.items()}
        # allocate_per_step: the rows written this cycle, per group (keyed by its first column)
        self._rows: dict[int, list[dict[str, torch.Tensor]]] = {}

    def write_obs(self, t: int, obs: np.ndarray, first: np.ndarray, cols: slice = ALL) -> np.ndarray:
        """Store ``obs[t]`` / ``first[t]`` (``t`` up to ``unroll_len``) of columns ``cols``; returns the stored
        observations."""
        if self.allocate_per_step:
            row = {'obs': torch.tensor(obs), 'first': torch.tensor(first)}
            self._rows.setdefault(cols.start or 0, []).append(row)
            return row['obs'].numpy()
        arrays = self._arrays
        target = arrays['obs'][t, cols]
        target[...] = obs
        arrays['first'][t, cols] = first
        return target

    def logit_out(self, t: int, cols: slice = ALL) -> np.ndarray:
        """Where the logits of step ``t`` of columns ``cols`` go, for an actor that computes them in place (it
        then passes ``logit=None`` to :meth:`write_step`)."""
        if self.allocate_per_step:
            envs = len(range(*cols.indices(self.num_envs)))
            out = np.empty((envs, self.action_num), dtype=np.float32)
            self._rows[cols.start or 0][-1]['logit'] = torch.from_numpy(out)
            return out
        return self._arrays['logit'][t, cols]

    def write_step(
        self,
        t: int,
        action: np.ndarray,
        logit: np.ndarray | None,
        reward: np.ndarray,
        done: np.ndarray,
        truncated: np.ndarray,
        mask: np.ndarray,
        cols: slice = ALL,
    ) -> None:
        """Store what step ``t`` did in columns ``cols``: the action and its logits (None: written through
        :meth:`logit_out`), then the env's reward / done / truncated, and whether the step carried a transition
        (``mask``, bool or float)."""
        if self.allocate_per_step:
            row = self._rows[cols.start or 0][-1]
            row.update(
                action=torch.tensor(action, dtype=torch.int64),
                reward=torch.tensor(reward, dtype=torch.float32),
                done=torch.tensor(done),
                truncated=torch.tensor(truncated),
                mask=torch.tensor(mask, dtype=torch.float32),
            )
            if logit is not None:
                row['logit'] = torch.tensor(logit)
            return
        arrays = self._arrays
        arrays['action'][t, cols] = action
        if logit is not None:
            arrays['logit'][t, cols] = logit
        arrays['reward'][t, cols] = reward
        arrays['done'][t, cols] = done
        arrays['truncated'][t, cols] = truncated
        arrays['mask'][t, cols] = mask

    def finish(self) -> None:
        """Allocate-per-step mode: stack each group's rows and join the groups into new ``tensors``."""
        if not self.allocate_per_step:
            return
        groups = [rows for _, rows in sorted(self._rows.items())]
        self._rows = {}
        joined = {}
        for key in TENSOR_KEYS:
            per_group = [
                torch.stack([row[key] for row in (rows if key in ('obs', 'first') else rows[:-1])]) for rows in groups
            ]
            joined[key] = torch.cat(per_group, dim=1)
        self.tensors = joined


@dataclass
class Unroll:
    """One actor cycle of one env group, as queued for the learner."""

    tensors: dict[str, torch.Tensor]
    initial_state: Any
    final_state: Any
    policy_version: int
    env_steps: int
    actor_id: int
    episode_returns: list[float]
    buffer: TrajectoryBuffer | None = None
    pool: queue.Queue | None = None

    def release(self) -> None:
        """Give the buffer back to its actor (the learner has copied what it needs)."""
        if self.pool is not None and self.buffer is not None:
            self.pool.put(self.buffer)
        self.buffer = None
        self.pool = None


def join_states(states: Sequence[Any]) -> Any:
    """The unrolls' initial actor states joined on their batch dim (None for stateless models)."""
    if not states or states[0] is None:
        return None
    if isinstance(states[0], torch.Tensor):
        return torch.cat(list(states), dim=0)
    return tuple(torch.cat([s[i] for s in states], dim=0) for i in range(len(states[0])))


def join_unrolls(unrolls: Sequence[Unroll]) -> dict[str, Any]:
    """A learner batch: the unrolls' tensors joined on dim 1 (new tensors: the buffers can be released), and
    their initial states under ``'actor_state'``."""
    batch: dict[str, Any] = {key: torch.cat([u.tensors[key] for u in unrolls], dim=1) for key in TENSOR_KEYS}
    batch['actor_state'] = join_states([u.initial_state for u in unrolls])
    return batch


__all__ = ['TrajectoryBuffer', 'Unroll', 'join_unrolls', 'join_states']
