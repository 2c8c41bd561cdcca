"""``type='gymnasium'``: any registered gymnasium id as a ding env, configured by keys alone (docs/envs.md)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
from easydict import EasyDict
from gymnasium import spaces

from ding.config.validate import validate_section
from ding.envs.vector.envpool_single import build_envpool_env
from ding.envs.vector.gymnasium_env import build_env
from ding.envs.vector.settings import ATARI_DEFAULTS, VectorEnvSettings, read_settings
from ding.utils import ENV_REGISTRY

from .ding_env_wrapper import DingEnvWrapper

SERIAL_BACKENDS = ('gymnasium', 'envpool')

# Keys every env section may hold (read by the pipelines, not by the env): None defaults leave their type to the
# bounds of ding.config.bounds.
PIPELINE_ENV_KEYS: dict[str, Any] = dict(
    collector_env_num=None, evaluator_env_num=None, n_evaluator_episode=None, stop_value=None, is_train=None
)


def build_backend_env(settings: VectorEnvSettings) -> Any:
    """One gymnasium env of ``settings.env_id`` on ``env.backend`` ('gymnasium' or 'envpool')."""
    return build_envpool_env(settings) if settings.backend == 'envpool' else build_env(settings)


def _keep_dtype(obs: Any) -> Any:
    return obs


@ENV_REGISTRY.register('gymnasium')
class GymnasiumEnv(DingEnvWrapper):
    """A gymnasium env built from ``env_id`` with the named ``wrappers`` (those of ``ding.envs.vector``:
    ``atari``, ``obs_norm``, ``mask_velocity``). Atari ids get the standard preprocessing; collector envs
    (``is_train``) train with episodic life and clipped rewards, evaluator envs play whole games for true
    returns. Image observations stay uint8 (the conv encoders scale them); other Box observations are float32.
    Discrete, Box and MultiDiscrete action spaces work as ``DingEnvWrapper`` describes."""

    config = dict(
        env_id=None,
        backend='gymnasium',
        wrappers=[],
        max_episode_steps=None,
        make_kwargs={},
        envpool_kwargs={},
        act_scale=False,
        **ATARI_DEFAULTS,
    )

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(copy.deepcopy(cls.config))

    @classmethod
    def check_config(cls, env_cfg: Mapping[str, Any], allow_unknown_keys: bool = False) -> list[str]:
        """What is wrong with the (compiled) ``env`` section: unknown keys, types, the settings' values, and an
        id gymnasium cannot build with these settings (a probe env is built and closed)."""
        problems: list[str] = []
        section = {k: v for k, v in env_cfg.items() if k != 'manager'}
        defaults = {**cls.default_config(), **PIPELINE_ENV_KEYS}
        validate_section(section, defaults, 'env', {}, problems, allow_unknown_keys=allow_unknown_keys)
        if problems:
            return problems
        if section.get('backend') not in SERIAL_BACKENDS:
            return [f'env.backend must be one of {list(SERIAL_BACKENDS)}, got {section.get("backend")!r}']
        try:
            build_backend_env(read_settings(section, for_eval=False)).close()
        except (ValueError, ImportError) as e:
            problems.append(str(e) if str(e).startswith('env.') else f'env.env_id {section.get("env_id")!r}: {e}')
        return problems

    @classmethod
    def model_shapes(cls, env_cfg: Mapping[str, Any]) -> dict[str, Any]:
        """``obs_shape`` and ``action_shape`` for the model, read from a probe env's spaces: an int for a flat Box
        observation (else the shape as a list); ``n`` of a Discrete action space, the length of a Box one, the
        ``nvec`` list of a MultiDiscrete one. A space with no such shape is left out."""
        env = build_backend_env(read_settings({**cls.default_config(), **env_cfg}, for_eval=False))
        try:
            obs_space, action_space = env.observation_space, env.action_space
        finally:
            env.close()
        shapes: dict[str, Any] = {}
        if isinstance(obs_space, spaces.Box):
            shape = [int(n) for n in obs_space.shape]
            shapes['obs_shape'] = shape[0] if len(shape) == 1 else shape
        if isinstance(action_space, spaces.Discrete):
            shapes['action_shape'] = int(action_space.n)
        elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
            shapes['action_shape'] = int(action_space.shape[0])
        elif isinstance(action_space, spaces.MultiDiscrete):
            shapes['action_shape'] = [int(n) for n in action_space.nvec]
        return shapes

    def __init__(self, cfg: dict | None = None, caller: str = 'collector') -> None:
        merged = self.default_config()
        merged.update(cfg or {})
        self._settings = read_settings(merged, for_eval=not merged.get('is_train', True))
        super().__init__(cfg=merged, caller=caller)

    def _make_env(self) -> Any:
        return build_backend_env(self._settings)

    def _wrap_env(self, env: Any) -> Any:
        return env  # build_backend_env applied the wrappers (EnvPool takes some of them as its own options)

    def _setup(self, env: Any) -> None:
        super()._setup(env)
        space = self._observation_space
        if isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3:
            self._convert_obs = _keep_dtype  # frames stay uint8: a quarter of the memory in the replay buffer
            self._obs_dtype = np.dtype(np.uint8)

    def __repr__(self) -> str:
        return f'GymnasiumEnv({self._settings.env_id})'
