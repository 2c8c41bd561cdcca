"""In-process vectorised env manager: steps each sub-env in a loop, resets finished ones, restarts broken ones."""

from __future__ import annotations

import copy
import enum
import numbers
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from easydict import EasyDict

from ding.envs.env.base_env import BaseEnv, BaseEnvTimestep
from ding.utils import ENV_MANAGER_REGISTRY


class EnvState(enum.IntEnum):
    VOID = 0  # not created (before launch / after close)
    INIT = 1  # created, not reset yet
    RUN = 2  # in an episode, its obs is in ready_obs
    RESET = 3  # being reset
    DONE = 4  # finished its episode_num episodes
    ERROR = 5  # failed more than max_retry times in a row


def abnormal_timestep(obs: Any, error: BaseException) -> BaseEnvTimestep:
    """What a step returns for a sub-env that crashed and was restarted: its partial episode must be dropped."""
    return BaseEnvTimestep(obs, np.zeros(1, dtype=np.float32), True, {'abnormal': True, 'error': repr(error)})


@ENV_MANAGER_REGISTRY.register('base')
class BaseEnvManager:
    """Runs ``len(env_fn)`` envs in this process.

    Usage: ``seed(s)`` (env i gets ``s + i``), ``launch()``, then loop ``obs = ready_obs`` ->
    ``step({env_id: action})`` until ``done``; ``close()``. A finished sub-env is reset at once (``auto_reset``)
    and its new first obs appears in ``ready_obs``. A sub-env that raises in step/reset is rebuilt with its
    ``env_fn`` and reset; that step returns ``done=True, reward 0, info={'abnormal': True, 'error': ...}``.
    ``max_retry`` failures of one env in a row (no successful step between) raise a RuntimeError.

    Config keys: ``episode_num`` (episodes per env before it is done; abnormal episodes do not count),
    ``max_retry``, ``retry_waiting_time`` (seconds between restart attempts), ``auto_reset``,
    ``reset_timeout`` (enforced by the subprocess manager only; an in-process call cannot be interrupted).
    """

    config: dict[str, Any] = dict(
        episode_num=float('inf'),
        max_retry=5,
        reset_timeout=None,
        retry_waiting_time=0.1,
        auto_reset=True,
    )

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def __init__(self, env_fn: Sequence[Callable[[], BaseEnv]], cfg: dict | None = None) -> None:
        env_fn = list(env_fn)
        if not env_fn:
            raise ValueError(f'{type(self).__name__} needs at least one env_fn')
        for i, fn in enumerate(env_fn):
            if not callable(fn):
                raise TypeError(f'{type(self).__name__}: env_fn[{i}] is not callable: {fn!r}')
        merged = self.default_config()
        merged.update(cfg or {})
        self._cfg = merged
        self._env_fn = env_fn
        self._env_num = len(env_fn)
        self._episode_num = merged.episode_num
        if not self._episode_num > 0:
            raise ValueError(f"env manager config 'episode_num' must be > 0, got {self._episode_num!r}")
        self._max_retry = max(1, int(merged.max_retry))
        self._retry_waiting_time = float(merged.retry_waiting_time)
        self._auto_reset = bool(merged.auto_reset)
        self._reset_timeout = merged.reset_timeout
        self._closed = True
        self._env_ref: BaseEnv | None = None
        self._env_replay_path: list[str] | None = None
        self._env_seed: list[int | None] = [None] * self._env_num
        self._env_dynamic_seed = True
        self._seed_pending = [False] * self._env_num
        self._init_state()

    def _init_state(self) -> None:
        n = self._env_num
        self._env_states = {i: EnvState.VOID for i in range(n)}
        self._env_episode_count = [0] * n
        self._fail_streak = [0] * n
        self._num_done = 0
        self._ready_obs: dict[int, Any] = {}
        self._reset_param: dict[int, dict] = {i: {} for i in range(n)}

    # ---- properties ---------------------------------------------------------------------------------------------
    @property
    def env_num(self) -> int:
        return self._env_num

    @property
    def ready_obs(self) -> dict[int, Any]:
        """``{env_id: obs}`` of the envs waiting for an action (a new dict; the obs are not copied)."""
        return dict(self._ready_obs)

    @property
    def ready_env(self) -> list[int]:
        return list(self._ready_obs)

    @property
    def in_flight(self) -> int:
        """How many envs are stepping without having answered (always 0 here: ``step`` waits for every env)."""
        return 0

    @property
    def done(self) -> bool:
        """True once every env has finished ``episode_num`` episodes."""
        return self._num_done == self._env_num

    @property
    def active_env(self) -> list[int]:
        return [i for i, s in self._env_states.items() if s in (EnvState.INIT, EnvState.RUN, EnvState.RESET)]

    @property
    def env_state(self) -> dict[int, EnvState]:
        return dict(self._env_states)

    @property
    def closed(self) -> bool:
        return self._closed

    def _reference_env(self) -> BaseEnv:
        if not self._closed and self._envs[0] is not None:
            return self._envs[0]
        if self._env_ref is None:
            self._env_ref = self._env_fn[0]()
        return self._env_ref

    @property
    def observation_space(self) -> Any:
        return self._reference_env().observation_space

    @property
    def action_space(self) -> Any:
        return self._reference_env().action_space

    @property
    def reward_space(self) -> Any:
        return self._reference_env().reward_space

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError(f'{type(self).__name__} is not running: call launch() first (or it was closed)')

    # ---- seeding / replay ---------------------------------------------------------------------------------------
    def seed(self, seed: int | list[int] | dict[int, int], dynamic_seed: bool = True) -> None:
        """Seed the envs at their next reset: an int gives env i ``seed + i``; a list gives one seed per env;
        a dict ``{env_id: seed}`` changes only those envs. ``dynamic_seed=False`` replays the same episodes
        at every reset (evaluators)."""
        if isinstance(seed, numbers.Integral):
            seeds = {i: int(seed) + i for i in range(self._env_num)}
        elif isinstance(seed, (list, tuple)):
            if len(seed) != self._env_num:
                raise ValueError(f'seed list has {len(seed)} entries for {self._env_num} envs')
            seeds = dict(enumerate(seed))
        elif isinstance(seed, dict):
            seeds = seed
        else:
            raise TypeError(f'seed must be an int, a list or a dict of ints, got {type(seed).__name__}')
        for env_id, s in seeds.items():
            self._check_env_id(env_id)
            self._env_seed[env_id] = s
            self._seed_pending[env_id] = s is not None
        self._env_dynamic_seed = bool(dynamic_seed)

    def enable_save_replay(self, replay_path: str | list[str]) -> None:
        if isinstance(replay_path, str):
            replay_path = [replay_path] * self._env_num
        if len(replay_path) != self._env_num:
            raise ValueError(f'replay_path has {len(replay_path)} entries for {self._env_num} envs')
        self._env_replay_path = list(replay_path)
        if not self._closed:
            self._replay_built_envs(self._env_replay_path)

    def _replay_built_envs(self, replay_path: list[str]) -> None:
        """Envs already built save replays from their next reset on too (new ones get the path when built)."""
        for env_id, env in enumerate(self._envs):
            if env is not None:
                env.enable_save_replay(replay_path[env_id])

    def _check_env_id(self, env_id: Any) -> None:
        if not isinstance(env_id, numbers.Integral) or not 0 <= int(env_id) < self._env_num:
            raise KeyError(f'env id {env_id!r} out of range (env_num={self._env_num})')

    # ---- lifecycle ----------------------------------------------------------------------------------------------
    def launch(self, reset_param: dict[int, dict] | None = None) -> None:
        """Create the envs (seeded as set by ``seed``) and reset them. On a running manager: same as ``reset``."""
        if reset_param is not None:
            for env_id in reset_param:
                self._check_env_id(env_id)
            # every env starts; those without an entry reset with no kwargs
            reset_param = {i: reset_param.get(i, {}) for i in range(self._env_num)}
        if self._closed:
            self._init_state()
            self._create_envs()
            self._closed = False
        self.reset(reset_param)

    def _create_envs(self) -> None:
        self._envs: list[BaseEnv | None] = [None] * self._env_num
        for i in range(self._env_num):
            self._env_states[i] = EnvState.INIT

    def reset(self, reset_param: dict[int, dict] | None = None) -> None:
        """Reset all envs (or only the ids in ``reset_param``, whose values are kwargs for ``env.reset``) and
        restart their episode counts."""
        self._check_closed()
        if reset_param is None:
            env_ids = list(range(self._env_num))
        else:
            env_ids = list(reset_param)
            for env_id in env_ids:
                self._check_env_id(env_id)
                param = reset_param[env_id]
                if param is not None and not isinstance(param, dict):
                    raise TypeError(f'reset_param[{env_id}] must be a dict of reset kwargs, got {type(param).__name__}')
                self._reset_param[env_id] = dict(param or {})
        for env_id in env_ids:
            if self._env_states[env_id] == EnvState.DONE:
                self._num_done -= 1
            self._env_episode_count[env_id] = 0
            self._env_states[env_id] = EnvState.RESET
            self._ready_obs.pop(env_id, None)
        self._reset_envs(env_ids)

    def _reset_envs(self, env_ids: list[int]) -> None:
        for env_id in env_ids:
            self._reset_one(env_id)

    def _reset_one(self, env_id: int) -> None:
        try:
            env = self._envs[env_id]
            if env is None:
                env = self._envs[env_id] = self._make_env(env_id)
            seed = self._env_seed[env_id]
            if self._seed_pending[env_id] and seed is not None:
                env.seed(seed, self._env_dynamic_seed)
                self._seed_pending[env_id] = False
            obs = env.reset(**self._reset_param[env_id])
        except Exception as e:  # noqa: BLE001 -- any env failure is handled by a restart
            obs = self._restart(env_id, e)
        self._ready_obs[env_id] = obs
        self._env_states[env_id] = EnvState.RUN

    @staticmethod
    def _built_env(env: BaseEnv | None, env_id: int) -> BaseEnv:
        if env is None:  # only between a failed rebuild and the restart that replaces it
            raise RuntimeError(f'env {env_id} is not built')
        return env

    def _make_env(self, env_id: int) -> BaseEnv:
        env = self._env_fn[env_id]()
        if self._env_replay_path is not None:
            env.enable_save_replay(self._env_replay_path[env_id])
        return env

    def _renew_env(self, env_id: int) -> Any:
        """Replace env ``env_id`` by a fresh one from its env_fn (seeded as before) and return its first obs."""
        old, self._envs[env_id] = self._envs[env_id], None
        if old is not None:
            try:
                old.close()
            except Exception:  # noqa: BLE001 -- a broken env may fail to close; it is dropped anyway
                pass
        env = self._envs[env_id] = self._make_env(env_id)
        seed = self._env_seed[env_id]
        if seed is not None:
            env.seed(seed, self._env_dynamic_seed)
            self._seed_pending[env_id] = False
        return env.reset(**self._reset_param[env_id])

    def _restart(self, env_id: int, error: BaseException) -> Any:
        """Count ``error`` as a failure of ``env_id`` and rebuild the env until it resets; return its first obs.
        Raise RuntimeError (after closing the manager) once it failed ``max_retry`` times in a row."""
        self._fail_streak[env_id] += 1
        while self._fail_streak[env_id] < self._max_retry:
            try:
                return self._renew_env(env_id)
            except Exception as e:  # noqa: BLE001
                error = e
                self._fail_streak[env_id] += 1
                time.sleep(self._retry_waiting_time)
        self._env_states[env_id] = EnvState.ERROR
        streak = self._fail_streak[env_id]
        self.close()
        raise RuntimeError(
            f'{type(self).__name__}: env {env_id} failed {streak} times in a row (max_retry={self._max_retry}); '
            f'last error: {error!r}'
        ) from error

    def _episode_finished(self, env_id: int) -> bool:
        """Book-keeping after a normal episode end; True when the env should start another episode."""
        count = self._env_episode_count[env_id] = self._env_episode_count[env_id] + 1
        if count >= self._episode_num:
            self._env_states[env_id] = EnvState.DONE
            self._num_done += 1
            return False
        if not self._auto_reset:
            self._env_states[env_id] = EnvState.INIT
            return False
        return True

    # ---- stepping -----------------------------------------------------------------------------------------------
    def step(self, actions: dict[int, Any]) -> dict[int, BaseEnvTimestep]:
        """Step each env in ``actions`` (only ids in ``ready_obs``); return ``{env_id: BaseEnvTimestep}``."""
        if self._closed:
            self._check_closed()
        ready = self._ready_obs
        envs = self._envs
        streak = self._fail_streak
        timesteps = {}
        for env_id, action in actions.items():
            if env_id not in ready:
                raise KeyError(f'env {env_id!r} is not waiting for an action (ready: {sorted(ready)})')
            try:
                timestep = self._built_env(envs[env_id], env_id).step(action)
            except Exception as e:  # noqa: BLE001 -- a crashing env is restarted, the others go on
                last_obs = ready[env_id]
                ready[env_id] = self._restart(env_id, e)
                timesteps[env_id] = abnormal_timestep(last_obs, e)
                continue
            if streak[env_id]:
                streak[env_id] = 0
            if timestep.done:
                del ready[env_id]
                if self._episode_finished(env_id):
                    self._env_states[env_id] = EnvState.RESET
                    self._reset_one(env_id)
            else:
                ready[env_id] = timestep.obs
            timesteps[env_id] = timestep
        return timesteps

    def close(self) -> None:
        """Close every env; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        for env in getattr(self, '_envs', []):
            if env is not None:
                try:
                    env.close()
                except Exception:  # noqa: BLE001 -- closing must reach every env
                    pass
        self._envs = [None] * self._env_num
        self._close_common()

    def _close_common(self) -> None:
        if self._env_ref is not None:
            try:
                self._env_ref.close()
            except Exception:  # noqa: BLE001
                pass
            self._env_ref = None
        self._ready_obs.clear()
        for i in range(self._env_num):
            if self._env_states[i] != EnvState.ERROR:
                self._env_states[i] = EnvState.VOID

    def __enter__(self) -> BaseEnvManager:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f'{type(self).__name__}(env_num={self._env_num}, closed={self._closed})'
