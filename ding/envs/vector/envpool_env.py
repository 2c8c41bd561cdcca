"""The EnvPool backend of ``make_vector_env``: C++ envs stepped by EnvPool's thread pool (the GIL is released
while they step), through its asynchronous ``send`` / ``recv``. EnvPool resets an env on the step after its
episode ended, as the protocol asks."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from gymnasium import spaces

from .settings import ATARI_DEFAULTS, VectorEnvSettings, envpool_task_id, is_atari_id
from .wrappers import ENVPOOL_WRAPPERS, check_wrapper_names, observation_keep

ENVPOOL_ATARI_NAMES = {'fire_reset': 'use_fire_reset'}
"""Atari keys EnvPool names differently (the others are EnvPool's names)."""

ENVPOOL_MISSING = "env.backend='envpool' needs the envpool package: pip install 'ding[envpool]'"


def import_envpool() -> Any:
    """The ``envpool`` module; ``ImportError`` with the install command when it is missing."""
    try:
        import envpool  # deferred: an optional extra (ding[envpool])
    except ImportError as e:
        raise ImportError(ENVPOOL_MISSING) from e
    return envpool


@contextlib.contextmanager
def float32_bounds_quiet() -> Iterator[None]:
    """Hide gymnasium's warning about EnvPool's float64 bounds of float32 boxes (the cast is harmless)."""
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='.*precision lowered', category=UserWarning)
        yield


def envpool_available() -> bool:
    try:
        import_envpool()
    except ImportError:
        return False
    return True


def envpool_ships(env_id: str) -> bool:
    """EnvPool is installed and has an env for this gymnasium id."""
    return envpool_available() and envpool_task_id(env_id) in import_envpool().list_all_envs()


def envpool_options(settings: VectorEnvSettings, num_envs: int) -> dict[str, Any]:
    """The keyword arguments of ``envpool.make`` for these settings (without the seed)."""
    options: dict[str, Any] = dict(
        num_envs=num_envs, batch_size=num_envs, num_threads=min(num_envs, os.cpu_count() or 1)
    )
    if is_atari_id(settings.env_id):
        options.update({ENVPOOL_ATARI_NAMES.get(key, key): settings.atari[key] for key in ATARI_DEFAULTS})
    if settings.max_episode_steps is not None:
        options['max_episode_steps'] = settings.max_episode_steps
    options.update(settings.envpool_kwargs)
    return options


class EnvPoolVectorEnv:
    """``num_envs`` EnvPool envs as one ``VectorEnv`` (``ding.worker.async_actor.protocol``).

    ``envpool.make`` seeds at construction: the pool is built with ``seed`` here (env ``i`` seeded from ``seed``
    and ``i``), so a bad setting fails at once; ``reset`` rebuilds it unless it is the first reset with that
    seed, so ``reset(seed)`` always replays the same episodes. The arrays ``recv`` returns are EnvPool's own
    (no copy).
    """

    def __init__(self, settings: VectorEnvSettings, num_envs: int, seed: int) -> None:
        envpool = import_envpool()
        self.task_id = envpool_task_id(settings.env_id)
        if self.task_id not in envpool.list_all_envs():
            raise ValueError(
                f"env.env_id {settings.env_id!r}: envpool does not ship {self.task_id!r}; use env.backend='gymnasium'"
            )
        check_wrapper_names(settings.wrappers, ENVPOOL_WRAPPERS)
        self._keep: list[int] | None = None
        for wrapper in settings.wrappers:
            if wrapper.name == 'mask_velocity':
                self._keep = list(observation_keep(settings.env_id, wrapper.options))
            elif not is_atari_id(settings.env_id):  # 'atari': EnvPool's own preprocessing, Atari games only
                raise ValueError(f'env.wrappers: atari applies to Atari games, not {settings.env_id!r}')
        self.options = envpool_options(settings, num_envs)
        self._envpool = envpool
        self._pool: Any = None
        self._unused_seed: int | None = None  # the seed of a pool not reset yet
        self._build(seed)
        try:
            with float32_bounds_quiet():
                self._read_spaces(settings.env_id)
        except ValueError:
            self.close()
            raise
        self.num_envs = num_envs
        self._all_ids = np.arange(num_envs, dtype=np.int32)
        self._in_order = self._all_ids.tobytes()  # comparing bytes is ~20x faster than np.array_equal per step

    def _read_spaces(self, env_id: str) -> None:
        action_space, obs_space = self._pool.single_action_space, self._pool.single_observation_space
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(
                f'env.env_id {env_id!r}: the async pipeline needs a Discrete action space, got {action_space}'
            )
        shape = tuple(obs_space.shape)
        if self._keep is not None:
            if len(shape) != 1 or max(self._keep) >= shape[0]:
                raise ValueError(f'env.wrappers: mask_velocity needs a flat observation with entries {self._keep}')
            shape = (len(self._keep),)
        self.observation_shape: tuple[int, ...] = shape
        self.observation_dtype = np.dtype(obs_space.dtype)
        self.action_num = int(action_space.n)

    def _build(self, seed: int) -> None:
        self.close()
        try:
            with float32_bounds_quiet():  # envpool builds its spaces at make and on the first recv
                self._pool = self._envpool.make(self.task_id, env_type='gymnasium', seed=seed, **self.options)
        except TypeError as e:  # envpool names the unknown keyword
            raise ValueError(f'env.envpool_kwargs for {self.task_id!r}: {e}') from e
        self._unused_seed = seed

    def _in_env_order(self, obs: np.ndarray, info: dict[str, Any], *rest: np.ndarray) -> tuple[np.ndarray, ...]:
        env_id = info['env_id']
        if np.asarray(env_id, dtype=np.int32).tobytes() != self._in_order:  # envpool returns them as they finish
            order = np.argsort(env_id)
            obs, rest = obs[order], tuple(a[order] for a in rest)
        if self._keep is not None:
            obs = obs[:, self._keep]
        return (obs, *rest)

    def reset(self, seed: int) -> np.ndarray:
        """Reset every env, seeded with ``seed`` (rebuilding the pool unless it is new with that seed)."""
        if self._pool is None or self._unused_seed != seed:
            self._build(seed)
        self._unused_seed = None
        with float32_bounds_quiet():
            obs, info = self._pool.reset()
        return self._in_env_order(obs, info)[0]

    def send(self, actions: np.ndarray) -> None:
        """Start one step of every env with ``actions`` ``[num_envs]``; returns at once."""
        if self._pool is None or self._unused_seed is not None:
            raise RuntimeError('send() before reset(seed)')
        self._pool.send(np.asarray(actions, dtype=np.int32), self._all_ids)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Wait for the step ``send`` started: ``(obs, reward float32, terminated, truncated)`` in env order."""
        obs, reward, terminated, truncated, info = self._pool.recv()
        obs, reward, terminated, truncated = self._in_env_order(obs, info, reward, terminated, truncated)
        return obs, np.asarray(reward, dtype=np.float32), terminated, truncated

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``send`` then ``recv``."""
        self.send(actions)
        return self.recv()

    def close(self) -> None:
        """Stop EnvPool's threads; safe to call twice."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __repr__(self) -> str:
        return f'EnvPoolVectorEnv({self.task_id}, {self.num_envs} envs, obs {self.observation_shape} {self.observation_dtype})'
