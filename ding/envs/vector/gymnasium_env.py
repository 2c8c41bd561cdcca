"""The gymnasium backend of ``make_vector_env``: ``AsyncVectorEnv`` (one subprocess per env) or ``SyncVectorEnv``,
both with NEXT_STEP autoreset (an env resets on the step after its episode ended, as EnvPool does)."""

from __future__ import annotations

import contextlib
import functools

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import TransformObservation

from .settings import VectorEnvSettings, WrapperSpec, is_atari_id
from .wrappers import apply_wrappers


def register_atari() -> None:
    """Register ale-py's Atari ids with gymnasium; ``ImportError`` with the install command when it is missing."""
    try:
        import ale_py  # deferred: an optional extra, only for Atari ids
    except ImportError as e:
        raise ImportError("Atari env ids need ale-py: pip install 'ding[atari]'") from e
    gymnasium.register_envs(ale_py)


def _as_float32(obs: np.ndarray) -> np.ndarray:
    return obs.astype(np.float32)


def build_env(settings: VectorEnvSettings) -> gymnasium.Env:
    """One env with the settings' wrappers (float observations as float32): what each worker of the vector env
    runs."""
    kwargs = dict(settings.make_kwargs)
    wrappers = settings.wrappers
    if is_atari_id(settings.env_id):
        register_atari()
        # frames come one by one: the atari wrapper skips, pools and limits in agent steps
        kwargs.update(frameskip=1, repeat_action_probability=settings.atari['repeat_action_probability'])
        if not any(spec.name == 'atari' for spec in wrappers):
            wrappers = (WrapperSpec('atari'), *wrappers)
    elif settings.max_episode_steps is not None:
        kwargs['max_episode_steps'] = settings.max_episode_steps
    try:
        env = gymnasium.make(settings.env_id, **kwargs)
    except gymnasium.error.DependencyNotInstalled as e:
        hint = "pip install 'ding[mujoco]'" if 'mujoco' in str(e).lower() else str(e)
        raise ImportError(f'env.env_id {settings.env_id!r} needs a package that is not installed: {hint}') from e
    except gymnasium.error.Error as e:
        raise ValueError(f'env.env_id {settings.env_id!r}: gymnasium cannot make it ({e})') from e
    return with_float32_observations(apply_wrappers(env, settings, wrappers))


def with_float32_observations(env: gymnasium.Env) -> gymnasium.Env:
    """``env`` with float Box observations as float32 (what the models compute in); other spaces as they are."""
    space = env.observation_space
    if isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating) and space.dtype != np.float32:
        low, high = space.low.astype(np.float32), space.high.astype(np.float32)
        env = TransformObservation(env, _as_float32, spaces.Box(low, high, dtype=np.float32))
    return env


class GymnasiumVectorEnv:
    """``num_envs`` gymnasium envs as one ``VectorEnv`` (``ding.worker.async_actor.protocol``).

    ``asynchronous`` runs each env in a subprocess (``settings.context``: the multiprocessing start method, None
    for the platform's default), so the envs step between ``send`` and ``recv``; otherwise they step in this
    thread at ``recv``. Observations come without a copy: the arrays ``recv`` returns are valid until the next
    ``send``.
    """

    def __init__(self, settings: VectorEnvSettings, num_envs: int, asynchronous: bool = True) -> None:
        env_fns = [functools.partial(build_env, settings)] * num_envs
        # Check the spaces in this process first: a bad id or wrapper fails here with its own message.
        probe = build_env(settings)
        try:
            single_obs, single_action = probe.observation_space, probe.action_space
        finally:
            probe.close()
        if not isinstance(single_action, spaces.Discrete):
            raise ValueError(
                f'env.env_id {settings.env_id!r}: the async pipeline needs a Discrete action space, got {single_action}'
            )
        if not isinstance(single_obs, spaces.Box):
            raise ValueError(
                f'env.env_id {settings.env_id!r}: the async pipeline needs a Box observation space, got {single_obs}'
            )
        self.env: AsyncVectorEnv | SyncVectorEnv
        if asynchronous:
            self.env = AsyncVectorEnv(
                env_fns, copy=False, context=settings.context, autoreset_mode=AutoresetMode.NEXT_STEP
            )
        else:
            self.env = SyncVectorEnv(env_fns, copy=False, autoreset_mode=AutoresetMode.NEXT_STEP)
        self.num_envs = num_envs
        self.observation_shape: tuple[int, ...] = tuple(single_obs.shape)
        self.observation_dtype = np.dtype(single_obs.dtype)
        self.action_num = int(single_action.n)
        self._action_start = int(single_action.start)
        self._pending: np.ndarray | None = None

    def reset(self, seed: int) -> np.ndarray:
        """Reset every env (env ``i`` seeded with ``seed + i``); the first observations."""
        obs, _ = self.env.reset(seed=seed)
        return obs

    def send(self, actions: np.ndarray) -> None:
        """Start one step of every env with ``actions`` ``[num_envs]`` (ints in ``[0, action_num)``)."""
        actions = np.asarray(actions, dtype=np.int64)
        if self._action_start:
            actions = actions + self._action_start
        if isinstance(self.env, AsyncVectorEnv):
            self.env.step_async(actions)
        else:
            self._pending = actions

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Wait for the step ``send`` started: ``(obs, reward float32, terminated, truncated)``."""
        if isinstance(self.env, AsyncVectorEnv):
            obs, reward, terminated, truncated, _ = self.env.step_wait()
        else:
            if self._pending is None:
                raise RuntimeError('recv() without a send() before it')
            actions, self._pending = self._pending, None
            obs, reward, terminated, truncated, _ = self.env.step(actions)
        return obs, np.asarray(reward, dtype=np.float32), terminated, truncated

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``send`` then ``recv``."""
        self.send(actions)
        return self.recv()

    @property
    def worker_pids(self) -> list[int]:
        """Pids of the env subprocesses (none when not asynchronous)."""
        if isinstance(self.env, AsyncVectorEnv):
            return [p.pid for p in self.env.processes if p.pid is not None]
        return []

    def close(self) -> None:
        """Stop every env; no subprocess outlives this call."""
        if self.env.closed:
            return
        if isinstance(self.env, AsyncVectorEnv):
            try:
                self.env.close(timeout=5.0)
            except Exception:  # a broken or hung worker: make sure none is left behind
                with contextlib.suppress(Exception):
                    self.env.close(terminate=True)
            for process in self.env.processes:
                if process.is_alive():
                    process.terminate()
                process.join(timeout=5.0)
        else:
            self.env.close()

    def __repr__(self) -> str:
        mode = 'async' if isinstance(self.env, AsyncVectorEnv) else 'sync'
        return (
            f'GymnasiumVectorEnv({self.num_envs} envs, {mode}, obs {self.observation_shape} {self.observation_dtype})'
        )
