"""The ``policy.seed`` section: its keys, defaults and bounds, and the settings object the pipeline reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SEED_DEFAULTS: dict[str, Any] = dict(
    # actor processes, each stepping its own vectorised env
    actor_num=2,
    # envs per actor process (one slot of shared memory holds all of their observations)
    env_per_actor=8,
    # dynamic batching: one forward as soon as this many observations wait ...
    max_batch=64,
    # ... or this many microseconds after the first of them arrived
    max_wait_us=1000,
    # env steps per assembled chunk: the T of an IMPALA unroll; DQN hands over transitions in chunks as long
    unroll_len=20,
    # chunks waiting for the learner; a full queue makes the server (and so the actors) wait
    queue_size=4,
    # an actor that sends nothing this many seconds after its actions went out is dropped as hung
    actor_timeout=60.0,
    # an actor process that dies is started again this many times in all (0: never)
    max_actor_restarts=3,
    # remote actors (`ding seed-actor`): 'HOST:PORT' the learner listens on (None: off), and how many may join
    listen=None,
    remote_actor_num=0,
    # SEED DQN: actor i explores with eps ** (1 + i / (actor_num - 1) * eps_alpha) (Ape-X)
    eps=0.4,
    eps_alpha=7.0,
)

SEED_BOUNDS: dict[str, tuple[str, str]] = {
    'seed.actor_num': ('int', '[1, 1024]'),
    'seed.env_per_actor': ('int', '[1, 65535]'),
    'seed.max_batch': ('int', '[1, inf)'),
    'seed.max_wait_us': ('int', '[0, 10000000]'),
    'seed.unroll_len': ('int', '[1, inf)'),
    'seed.queue_size': ('int', '[1, inf)'),
    'seed.actor_timeout': ('number', '(0, inf)'),
    'seed.max_actor_restarts': ('int', '[0, inf)'),
    'seed.remote_actor_num': ('int', '[0, 1024]'),
    'seed.eps': ('number', '[0, 1]'),
    'seed.eps_alpha': ('number', '[0, inf)'),
}


@dataclass(frozen=True)
class SeedSettings:
    actor_num: int
    env_per_actor: int
    max_batch: int
    max_wait_us: int
    unroll_len: int
    queue_size: int
    actor_timeout: float
    max_actor_restarts: int
    listen: str | None
    remote_actor_num: int
    eps: float
    eps_alpha: float

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> SeedSettings:
        """The settings of a (validated) ``policy.seed`` section; missing keys take the defaults."""
        values = dict(SEED_DEFAULTS)
        values.update({k: v for k, v in (section or {}).items() if k in SEED_DEFAULTS})
        return cls(**values)

    def actor_eps(self, actor_id: int) -> float:
        """Ape-X's exploration of actor ``actor_id``: ``eps ** (1 + i / (N - 1) * alpha)`` over all ``N`` actors,
        local and remote (``eps`` for one actor)."""
        total = self.actor_num + self.remote_actor_num
        if total == 1:
            return float(self.eps)
        return float(self.eps ** (1 + actor_id / (total - 1) * self.eps_alpha))


__all__ = ['SEED_BOUNDS', 'SEED_DEFAULTS', 'SeedSettings']
