"""A learner task that is one rank of a data-parallel group (``policy.learn.learner.multi_learner.mode =
'data_parallel'``): the ``dist`` field of its start task, joining and leaving the torch.distributed process group.

The coordinator starts the group's tasks at the same time, each with ``dist = {rank, world_size, init_method,
backend, timeout}``; every rank joins before its learner is built, so the policy's constructor broadcasts rank 0's
weights and every learn step averages the gradients (``Policy.backward_and_sync_gradients``). Rank 0 alone publishes the policy
file and writes checkpoints. When a rank's learner ends it leaves the group: a rank still waiting in a collective
for it then fails at once ("connection closed by peer") instead of waiting for the group's timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ding.config.errors import ConfigError
from ding.utils.pytorch_ddp_dist_helper import dist_finalize, dist_init

BACKENDS = ('gloo', 'nccl')


def _int_field(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f'learner task: dist.{key} must be an int >= 0, got {value!r}')
    return value


@dataclass(frozen=True)
class DistSettings:
    """The ``dist`` field of a start task."""

    rank: int
    world_size: int
    init_method: str
    backend: str
    timeout: float

    @classmethod
    def of(cls, task_info: dict[str, Any]) -> DistSettings | None:
        """The task's group, None for a task that trains alone; ``ConfigError`` naming the bad ``dist.*`` field."""
        dist = task_info.get('dist')
        if dist is None:
            return None
        if not isinstance(dist, dict):
            raise ConfigError(f'learner task: dist must be a dict, got {dist!r}')
        rank = _int_field(dist.get('rank'), 'rank')
        world_size = _int_field(dist.get('world_size'), 'world_size')
        if not 0 <= rank < world_size:
            raise ConfigError(f'learner task: dist.rank {rank} is not below dist.world_size {world_size}')
        init_method = dist.get('init_method')
        if not isinstance(init_method, str) or not init_method.startswith('tcp://'):
            raise ConfigError(f"learner task: dist.init_method must be 'tcp://HOST:PORT', got {init_method!r}")
        backend = dist.get('backend', 'gloo')
        if backend not in BACKENDS:
            raise ConfigError(f'learner task: dist.backend must be one of {BACKENDS}, got {backend!r}')
        timeout = dist.get('timeout', 60.0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(f'learner task: dist.timeout must be a number of seconds > 0, got {timeout!r}')
        return cls(rank, world_size, init_method, str(backend), float(timeout))

    def join(self) -> None:
        """Join the process group (blocks until every rank joined, or ``timeout``)."""
        dist_init(
            backend=self.backend,
            init_method=self.init_method,
            rank=self.rank,
            world_size=self.world_size,
            timeout=self.timeout,
        )

    @staticmethod
    def leave() -> None:
        """Leave the process group (idempotent); a peer waiting in a collective then fails at once."""
        dist_finalize()

    def describe(self) -> str:
        return f'rank {self.rank} of {self.world_size} ({self.backend}, {self.init_method})'


__all__ = ['BACKENDS', 'DistSettings']
