"""The environment interface every ding env implements, and the timestep it returns."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections import namedtuple
from typing import Any

# reward: np.ndarray float32 of shape (1,); done: bool; info: dict (``eval_episode_return`` at episode end).
BaseEnvTimestep = namedtuple('BaseEnvTimestep', ['obs', 'reward', 'done', 'info'])


def _env_num(cfg: dict, key: str) -> int:
    if key not in cfg:
        raise KeyError(f"env config lacks '{key}' (needed to build the {key.split('_')[0]} envs)")
    num = cfg[key]
    if not isinstance(num, int) or isinstance(num, bool) or num < 1:
        raise ValueError(f"env config '{key}' must be a positive int, got {num!r}")
    return num


class BaseEnv(ABC):
    """Abstract single environment.

    A subclass implements ``reset() -> obs``, ``step(action) -> BaseEnvTimestep``, ``seed(seed, dynamic_seed)``,
    ``close()``, ``__repr__`` and the ``observation_space`` / ``action_space`` / ``reward_space`` properties.
    It accumulates the episode's return itself and puts it in ``info['eval_episode_return']`` on the last step.
    """

    def __init__(self, cfg: dict | None = None) -> None:
        self._cfg = cfg

    @abstractmethod
    def reset(self) -> Any:
        """Start a new episode and return its first observation."""

    @abstractmethod
    def step(self, action: Any) -> BaseEnvTimestep:
        """Apply ``action`` and return ``BaseEnvTimestep(obs, reward, done, info)``."""

    @abstractmethod
    def seed(self, seed: int, dynamic_seed: bool = True) -> None:
        """Seed the env. ``dynamic_seed=True``: each episode differs (deterministically);
        ``False``: every reset replays the same episode (used by evaluators)."""

    @abstractmethod
    def close(self) -> None:
        """Release the env's resources; safe to call twice."""

    @abstractmethod
    def __repr__(self) -> str: ...

    @property
    @abstractmethod
    def observation_space(self) -> Any: ...

    @property
    @abstractmethod
    def action_space(self) -> Any: ...

    @property
    @abstractmethod
    def reward_space(self) -> Any: ...

    @classmethod
    def create_collector_env_cfg(cls, cfg: dict) -> list[dict]:
        """One config per collector env (``cfg.collector_env_num`` of them); ``cfg`` itself is not changed."""
        num = _env_num(cfg, 'collector_env_num')
        return [copy.deepcopy(cfg)] * num

    @classmethod
    def create_evaluator_env_cfg(cls, cfg: dict) -> list[dict]:
        """One config per evaluator env (``cfg.evaluator_env_num`` of them); ``cfg`` itself is not changed."""
        num = _env_num(cfg, 'evaluator_env_num')
        return [copy.deepcopy(cfg)] * num

    def enable_save_replay(self, replay_path: str) -> None:
        raise NotImplementedError(f'{type(self).__name__} does not support saving replays')

    def random_action(self) -> Any:
        """A random action from ``action_space`` (used for random warm-up collection)."""
        return self.action_space.sample()
