"""The ``policy.async_actor`` section: its keys, their defaults, and the settings object the pipeline reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The section's keys and defaults (validated by ding.config.validate.validate_section against these, with the
# bounds of ding.config.bounds.BOUNDS under 'async_actor.*').
ASYNC_ACTOR_DEFAULTS: dict[str, Any] = dict(
    # actor threads, each with its own model copy and vectorised env(s)
    actor_num=2,
    # envs per actor thread (split into two groups of env_per_actor // 2 with double buffering)
    env_per_actor=16,
    # env steps per actor cycle (the T of a trajectory)
    unroll_len=20,
    # trajectories waiting for the learner; a full queue makes the actors wait (or drop, see drop_when_full)
    trajectory_queue_size=2,
    # weight copies staged for the actors: 1 (the newest only) or 2
    staging_queue_size=1,
    # how many times the learner may train on the newest batch while no new trajectories are waiting
    updates_per_batch=1,
    # two env groups per actor: one steps while the other runs inference
    double_buffer=True,
    # a full trajectory queue drops the new trajectory (counted) instead of making the actor wait
    drop_when_full=False,
    # actors compute a feed-forward model's logits in numpy (several times cheaper than torch on small batches);
    # recurrent and image models act in torch either way
    numpy_inference=True,
    # CPU core ids the learner thread, the actor threads and their EnvPool worker threads are confined to (None:
    # wherever the OS puts them); e.g. [0] keeps every hand-off between them on one core
    cpu_affinity=None,
)


@dataclass(frozen=True)
class AsyncActorSettings:
    actor_num: int
    env_per_actor: int
    unroll_len: int
    trajectory_queue_size: int
    staging_queue_size: int
    updates_per_batch: int
    double_buffer: bool
    drop_when_full: bool
    numpy_inference: bool
    cpu_affinity: tuple[int, ...] | None = None

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> AsyncActorSettings:
        """The settings of a (validated) ``policy.async_actor`` section; missing keys take the defaults."""
        values = dict(ASYNC_ACTOR_DEFAULTS)
        values.update({k: v for k, v in (section or {}).items() if k in ASYNC_ACTOR_DEFAULTS})
        if values['cpu_affinity'] is not None:
            values['cpu_affinity'] = tuple(values['cpu_affinity'])
        return cls(**values)

    @property
    def env_groups(self) -> int:
        """Env groups per actor: 2 with double buffering, else 1."""
        return 2 if self.double_buffer else 1

    @property
    def envs_per_group(self) -> int:
        return self.env_per_actor // self.env_groups


__all__ = ['ASYNC_ACTOR_DEFAULTS', 'AsyncActorSettings']
