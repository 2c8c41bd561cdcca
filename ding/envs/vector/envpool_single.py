"""One EnvPool env as a gymnasium env: the ``envpool`` backend of the generic ``type='gymnasium'`` env (serial and
parallel pipelines), so the envs EnvPool ships (Atari with its C++ preprocessing, MuJoCo, classic control) step in
C++ under ding's env managers, with ding's gymnasium wrappers on top."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
import numpy as np

from .envpool_env import envpool_options, float32_bounds_quiet, import_envpool
from .gymnasium_env import with_float32_observations
from .settings import VectorEnvSettings, envpool_task_id, is_atari_id
from .wrappers import apply_wrappers


class EnvPoolSingleEnv(gymnasium.Env):
    """A batch of one EnvPool env behind ``reset`` / ``step``. EnvPool seeds at construction: ``reset(seed=s)``
    rebuilds the pool with ``s`` unless it was just built with it, so the same seed replays the same episode; a
    reset without a seed goes on with the pool's generator."""

    def __init__(self, settings: VectorEnvSettings, seed: int = 0) -> None:
        self._envpool = import_envpool()
        self.task_id = envpool_task_id(settings.env_id)
        if self.task_id not in self._envpool.list_all_envs():
            raise ValueError(
                f"env.env_id {settings.env_id!r}: envpool does not ship {self.task_id!r}; use env.backend='gymnasium'"
            )
        self._options = envpool_options(settings, 1)
        self._options.update(num_threads=1)
        self._pool: Any = None
        self._fresh_seed: int | None = None  # the seed of a pool not reset yet
        pool = self._build(seed)
        with float32_bounds_quiet():
            self.observation_space = pool.observation_space
            self.action_space = pool.action_space

    def _build(self, seed: int) -> Any:
        self.close()
        try:
            with float32_bounds_quiet():
                self._pool = self._envpool.make(self.task_id, env_type='gymnasium', seed=seed, **self._options)
        except TypeError as e:  # envpool names the unknown keyword
            raise ValueError(f'env.envpool_kwargs for {self.task_id!r}: {e}') from e
        self._fresh_seed = seed
        return self._pool

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None and seed != self._fresh_seed:
            self._build(seed)
        self._fresh_seed = None
        with float32_bounds_quiet():
            obs, info = self._pool.reset()
        return obs[0], _first(info)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self._pool.step(np.asarray(action)[None])
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), _first(info)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _first(info: dict[str, Any]) -> dict[str, Any]:
    return {key: value[0] if isinstance(value, np.ndarray) and value.ndim else value for key, value in info.items()}


def build_envpool_env(settings: VectorEnvSettings) -> gymnasium.Env:
    """One EnvPool env with the settings' wrappers: ``atari`` is EnvPool's own preprocessing (Atari ids get it
    whether listed or not), the others wrap it as on the gymnasium backend."""
    env: gymnasium.Env = EnvPoolSingleEnv(settings)
    if not is_atari_id(settings.env_id) and any(spec.name == 'atari' for spec in settings.wrappers):
        raise ValueError(f'env.wrappers: atari applies to Atari games, not {settings.env_id!r}')
    env = apply_wrappers(env, settings, tuple(spec for spec in settings.wrappers if spec.name != 'atari'))
    return with_float32_observations(env)
