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


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


class TrajectoryBuffer:
    """One unroll of ``unroll_len`` steps of ``num_envs`` envs, in tensors allocated once.

    The actor fills step ``t`` with :meth:`write_obs` and :meth:`write_step`; ``tensors`` maps each key of
    ``TENSOR_KEYS`` to its tensor. With ``allocate_per_step`` every write makes new tensors instead (the
    slow way, kept to measure what preallocation buys; see benchmarks/).
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
        t, b = unroll_len, num_envs
        self._obs_shape = tuple(obs_shape)
        self._obs_dtype = _torch_dtype(np.dtype(obs_dtype))
        self._action_num = action_num
        self.tensors: dict[str, torch.Tensor] = {
            'obs': torch.zeros((t + 1, b, *self._obs_shape), dtype=self._obs_dtype),
            'action': torch.zeros((t, b), dtype=torch.int64),
            'logit': torch.zeros((t, b, action_num), dtype=torch.float32),
            'reward': torch.zeros((t, b), dtype=torch.float32),
            'done': torch.zeros((t, b), dtype=torch.bool),
            'truncated': torch.zeros((t, b), dtype=torch.bool),
            'mask': torch.zeros((t, b), dtype=torch.float32),
            'first': torch.zeros((t + 1, b), dtype=torch.bool),
        }
        self._steps: list[dict[str, torch.Tensor]] = []  # allocate_per_step: the rows written so far

    def write_obs(self, t: int, obs: np.ndarray, first: np.ndarray) -> torch.Tensor:
        """Store ``obs[t]`` / ``first[t]`` (``t`` up to ``unroll_len``); returns the stored observation."""
        if self.allocate_per_step:
            row = {'obs': torch.tensor(obs), 'first': torch.tensor(first)}
            self._steps.append(row)
            return row['obs']
        target = self.tensors['obs'][t]
        target.copy_(torch.from_numpy(obs))
        self.tensors['first'][t].copy_(torch.from_numpy(first))
        return target

    def write_step(
        self,
        t: int,
        action: torch.Tensor,
        logit: torch.Tensor,
        reward: np.ndarray,
        done: np.ndarray,
        truncated: np.ndarray,
        mask: np.ndarray,
    ) -> None:
        """Store what step ``t`` did: the action and its logits, then the env's reward / done / truncated, and
        whether the step carried a transition (``mask``)."""
        if self.allocate_per_step:
            self._steps[-1].update(
                action=action.clone(),
                logit=logit.clone(),
                reward=torch.tensor(reward, dtype=torch.float32),
                done=torch.tensor(done),
                truncated=torch.tensor(truncated),
                mask=torch.tensor(mask, dtype=torch.float32),
            )
            return
        tensors = self.tensors
        tensors['action'][t].copy_(action)
        tensors['logit'][t].copy_(logit)
        tensors['reward'][t].copy_(torch.from_numpy(reward))
        tensors['done'][t].copy_(torch.from_numpy(done))
        tensors['truncated'][t].copy_(torch.from_numpy(truncated))
        tensors['mask'][t].copy_(torch.from_numpy(mask))

    def finish(self) -> None:
        """Allocate-per-step mode: stack the rows written this cycle into ``tensors`` (new tensors)."""
        if not self.allocate_per_step:
            return
        steps, self._steps = self._steps, []
        self.tensors = {key: torch.stack([row[key] for row in steps]) for key in ('obs', 'first')}
        for key in TENSOR_KEYS:
            if key not in self.tensors:
                self.tensors[key] = torch.stack([row[key] for row in steps[:-1]])


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
