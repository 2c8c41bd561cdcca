"""Adapter from a gymnasium env (5-tuple ``step``, ``reset(seed=...)``) to ding's ``BaseEnv``."""

from __future__ import annotations

import copy
import operator
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from easydict import EasyDict
from numpy.typing import DTypeLike

from .base_env import BaseEnv, BaseEnvTimestep

# gymnasium is imported inside the methods that need it (marked deferred): importing ding.envs must stay cheap.


def _to_numpy(action: Any, dtype: DTypeLike) -> np.ndarray:
    if hasattr(action, 'detach'):  # torch.Tensor, without importing torch here
        action = action.detach().cpu().numpy()
    return np.asarray(action, dtype=dtype)


def _discrete_action(action: Any) -> int:
    try:
        # python ints, numpy integer scalars / 0-d arrays and one-element integer torch tensors
        return operator.index(action)
    except TypeError:
        pass
    try:
        # one-element arrays / tensors, and integral floats
        value = action.item() if hasattr(action, 'item') else action
    except (ValueError, RuntimeError) as e:
        shape = getattr(action, 'shape', None)
        raise ValueError(f'a Discrete action must be one number, got {type(action).__name__} of shape {shape}') from e
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f'a Discrete action must be an integer, got {value!r}')
    return int(value)


def _make_box_action(space: Any, act_scale: bool) -> Callable[[Any], np.ndarray]:
    dtype = space.dtype if np.issubdtype(space.dtype, np.floating) else np.float32
    shape = space.shape
    low = space.low.astype(dtype)
    high = space.high.astype(dtype)
    if act_scale and not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f'act_scale=True needs a bounded Box action space, got {space}')
    half_range = (high - low) / 2

    def convert(action: Any) -> np.ndarray:
        a = _to_numpy(action, dtype)
        if a.shape != shape:
            if a.size != int(np.prod(shape)):
                raise ValueError(f'action of shape {a.shape} does not fit the action space {space}')
            a = a.reshape(shape)
        if act_scale:
            # the policy acts in [-1, 1]; map affinely onto [low, high]
            a = low + (np.clip(a, -1.0, 1.0) + 1.0) * half_range
        return np.clip(a, low, high)

    return convert


def _make_int_array_action(space: Any) -> Callable[[Any], np.ndarray]:
    shape = space.shape

    def convert(action: Any) -> np.ndarray:
        return _to_numpy(action, np.int64).reshape(shape)

    return convert


def _passthrough_action(action: Any) -> Any:
    if hasattr(action, 'detach'):
        return action.detach().cpu().numpy()
    return action


def _no_episode(episode_id: int) -> bool:
    # the wrapper starts each video itself, at an episode's first step (see DingEnvWrapper.step)
    return False


def _require_moviepy() -> None:
    try:
        import moviepy  # noqa: F401  # deferred: an optional extra, needed only to save replays
    except ImportError as e:
        raise ImportError(
            "saving replays (enable_save_replay) writes videos with moviepy: pip install 'ding[video]'"
        ) from e


def _float32_obs(obs: Any) -> np.ndarray:
    return np.asarray(obs, dtype=np.float32)


def _raw_obs(obs: Any) -> Any:
    return obs


class DingEnvWrapper(BaseEnv):
    """Wraps a gymnasium env (given as ``env`` or made from ``cfg.env_id``) as a ``BaseEnv``.

    - ``done = terminated or truncated``; a time-limit end also sets ``info['TimeLimit.truncated'] = True``.
    - obs is a float32 ``np.ndarray``; reward a float32 array of shape (1,);
      ``info['eval_episode_return']`` holds the episode's return on its last step.
    - actions may be torch tensors, numpy arrays or python numbers: Discrete -> int, Box -> float array
      clipped to the bounds (with ``cfg.act_scale`` the input is taken in [-1, 1] and scaled to the bounds).
    - ``seed(s, dynamic_seed)``: the first reset passes ``seed=s`` to gymnasium; with ``dynamic_seed`` later
      episodes continue the generator that reset seeded (each different, all reproducible); otherwise every
      reset passes ``seed=s`` again and replays the same episode.

    Config keys: ``env_id`` (gymnasium id, needed when ``env`` is None), ``act_scale`` (False),
    ``max_episode_steps`` (None: the id's registered limit), ``wrappers`` (the vector envs' named wrappers,
    e.g. ``['mask_velocity']``, applied to an env built from ``env_id``).
    """

    def __init__(
        self, env: Any = None, cfg: dict | None = None, seed_api: bool = True, caller: str = 'collector'
    ) -> None:
        self._cfg: EasyDict = EasyDict(cfg) if cfg is not None else EasyDict()
        if env is None and not self._cfg.get('env_id'):
            raise ValueError("DingEnvWrapper needs a gymnasium env (env=...) or a config with 'env_id'")
        self._caller = caller
        self._seed_api = seed_api  # False: the env cannot be seeded through reset(seed=...)
        self._act_scale = bool(self._cfg.get('act_scale', False))
        self._env: Any = None  # the gymnasium env (wrapped in RecordVideo while saving replays)
        self._recorder: Any = None  # that RecordVideo, while saving replays
        self._videos = 0
        self._seed: int | None = None
        self._dynamic_seed = True
        self._episode_idx = 0
        self._eval_episode_return = 0.0
        self._replay_path: str | None = None
        if env is not None:
            self._setup(env)

    # ---- construction -------------------------------------------------------------------------------------------
    def _make_env(self) -> Any:
        """Build the gymnasium env from the config (subclasses override to pin the id / make options)."""
        import gymnasium  # deferred: importing ding.envs stays cheap

        kwargs: dict[str, Any] = {}
        if self._cfg.get('max_episode_steps') is not None:
            kwargs['max_episode_steps'] = int(self._cfg.max_episode_steps)
        return gymnasium.make(self._cfg.env_id, **kwargs)

    def _setup(self, env: Any) -> None:
        from gymnasium import spaces  # deferred: importing ding.envs stays cheap

        if self._replay_path is not None:
            env = self._record_video(env, self._replay_path)
            self._recorder = env
        self._env = env
        self._observation_space = env.observation_space
        self._action_space = env.action_space
        if not hasattr(self, '_reward_space'):
            self._reward_space = spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
        act_space = self._action_space
        self._convert_action: Callable[[Any], Any]
        if isinstance(act_space, spaces.Discrete):
            self._convert_action = _discrete_action
        elif isinstance(act_space, spaces.Box):
            self._convert_action = _make_box_action(act_space, self._act_scale)
        elif isinstance(act_space, (spaces.MultiDiscrete, spaces.MultiBinary)):
            self._convert_action = _make_int_array_action(act_space)
        else:
            self._convert_action = _passthrough_action
        structured = isinstance(self._observation_space, (spaces.Dict, spaces.Tuple))
        self._convert_obs = _raw_obs if structured else _float32_obs
        self._obs_dtype: np.dtype | None = None if structured else np.dtype(np.float32)
        if self._seed is not None:
            self._action_space.seed(self._seed)

    def _ensure_env(self) -> None:
        if self._env is None:
            if not self._cfg.get('env_id'):
                raise RuntimeError('this DingEnvWrapper was closed and wraps a given env, which it cannot rebuild')
            self._setup(self._wrap_env(self._make_env()))

    def _wrap_env(self, env: Any) -> Any:
        """``env`` inside the config's named ``wrappers`` (a subclass whose ``_make_env`` applies them itself
        returns ``env`` as it is)."""
        if not self._cfg.get('wrappers'):
            return env
        from ding.envs.vector.wrappers import wrap_from_config  # deferred: imports gymnasium

        return wrap_from_config(env, self._cfg, for_eval=self._caller == 'evaluator')

    # ---- BaseEnv ------------------------------------------------------------------------------------------------
    def seed(self, seed: int, dynamic_seed: bool = True) -> None:
        self._seed = int(seed)
        self._dynamic_seed = bool(dynamic_seed)
        self._episode_idx = 0
        if self._env is not None:
            self._action_space.seed(self._seed)

    def _episode_seed(self) -> int | None:
        if self._seed is None or not self._seed_api:
            return None
        k = self._episode_idx
        self._episode_idx += 1
        if k == 0 or not self._dynamic_seed:
            return self._seed
        # Later dynamic episodes continue the generator seeded at the first reset: reproducible, different per
        # episode, and free (re-seeding gymnasium builds a new generator, ~30 us per episode).
        return None

    def reset(self, **kwargs: Any) -> Any:
        self._ensure_env()
        seed = self._episode_seed()
        if seed is not None:
            kwargs['seed'] = seed
        obs, _ = self._env.reset(**kwargs)
        self._eval_episode_return = 0.0
        return self._convert_obs(obs)

    def step(self, action: Any) -> BaseEnvTimestep:
        recorder = self._recorder
        if recorder is not None and not recorder.recording:
            # A video starts with an episode's first step, so the episode an auto-reset begins and nobody
            # plays leaves no file; RecordVideo ends it at the next reset or at close.
            recorder.start_recording(f'{recorder.name_prefix}-episode-{self._videos}')
            self._videos += 1
        obs, rew, terminated, truncated, info = self._env.step(self._convert_action(action))
        self._eval_episode_return += rew
        done = bool(terminated or truncated)
        if done:
            info = dict(info)
            if truncated and not terminated:
                info['TimeLimit.truncated'] = True
            info['eval_episode_return'] = float(self._eval_episode_return)
        return BaseEnvTimestep(self._convert_obs(obs), np.array([rew], dtype=np.float32), done, info)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = self._recorder = None

    def __repr__(self) -> str:
        name = self._cfg.get('env_id') or (self._env.spec.id if getattr(self._env, 'spec', None) else self._env)
        return f'DingEnvWrapper({name})'

    @property
    def observation_space(self) -> Any:
        self._ensure_env()
        return self._observation_space

    @property
    def action_space(self) -> Any:
        self._ensure_env()
        return self._action_space

    @property
    def reward_space(self) -> Any:
        self._ensure_env()
        return self._reward_space

    @property
    def observation_dtype(self) -> np.dtype | None:
        """The dtype of the observation arrays ``reset`` / ``step`` hand out (None: structured observations)."""
        self._ensure_env()
        return self._obs_dtype

    def random_action(self) -> Any:
        return self.action_space.sample()

    def enable_save_replay(self, replay_path: str) -> None:
        """Record every episode from the next reset on as an ``.mp4`` in ``replay_path`` (gymnasium's
        ``RecordVideo``; needs the ``video`` extra: ``pip install 'ding[video]'``). Called again with another
        directory, the video in progress is finished and later episodes go to the new one."""
        _require_moviepy()
        self._replay_path = os.fspath(replay_path)
        if self._env is not None:
            self._setup(self._env)

    def _record_video(self, env: Any, replay_path: str) -> Any:
        """``env`` wrapped in ``RecordVideo`` (rebuilt from its spec with ``render_mode='rgb_array'`` if needed)."""
        from gymnasium.wrappers import RecordVideo  # deferred: importing ding.envs stays cheap

        if isinstance(env, RecordVideo):
            if env.video_folder == os.path.abspath(replay_path):
                return env
            # a new directory (the evaluator asks for one per evaluation): end the video in progress there
            if env.recording:
                env.stop_recording()
            env = env.env
        if env.render_mode not in ('rgb_array', 'rgb_array_list'):
            spec = getattr(env, 'spec', None)
            if spec is None:
                raise ValueError(
                    f'saving replays needs an env that renders images (render_mode="rgb_array"); {env} has '
                    f'render_mode={env.render_mode!r} and no spec to rebuild it from'
                )
            import gymnasium  # deferred: importing ding.envs stays cheap

            env.close()
            env = gymnasium.make(spec, render_mode='rgb_array')
        # one prefix per wrapper and process: the envs of one manager share the replay directory
        prefix = f'rl-video-{os.getpid()}-{id(self):x}'
        with warnings.catch_warnings():
            # the envs of one manager share the directory on purpose, each with its own file prefix
            warnings.filterwarnings('ignore', message='.*Overwriting existing videos', category=UserWarning)
            return RecordVideo(env, replay_path, episode_trigger=_no_episode, name_prefix=prefix)

    def clone(self, caller: str = 'collector') -> DingEnvWrapper:
        """A fresh, unseeded copy of this env (same config; same gymnasium spec when built from an env)."""
        if self._cfg.get('env_id'):
            return type(self)(cfg=copy.deepcopy(self._cfg), caller=caller)
        import gymnasium  # deferred: importing ding.envs stays cheap

        spec = getattr(self._env, 'spec', None)
        env = gymnasium.make(spec) if spec is not None else copy.deepcopy(self._env)
        return type(self)(env=env, cfg=copy.deepcopy(self._cfg), caller=caller)

    @classmethod
    def create_collector_env_cfg(cls, cfg: dict) -> list[dict]:
        cfgs = super().create_collector_env_cfg(cfg)
        cfgs[0]['is_train'] = True  # the list holds one shared config object
        return cfgs

    @classmethod
    def create_evaluator_env_cfg(cls, cfg: dict) -> list[dict]:
        cfgs = super().create_evaluator_env_cfg(cfg)
        cfgs[0]['is_train'] = False
        return cfgs
