"""``make_vector_env``: the batch of envs one actor thread of the async pipeline steps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .envpool_env import ENVPOOL_MISSING, EnvPoolVectorEnv, envpool_available, envpool_ships
from .gymnasium_env import GymnasiumVectorEnv
from .settings import VectorEnvSettings, read_settings
from .wrappers import ENVPOOL_WRAPPERS

VectorEnvType = EnvPoolVectorEnv | GymnasiumVectorEnv


def choose_backend(settings: VectorEnvSettings) -> str:
    """``env.backend``, or when unset: 'envpool' if it is installed, ships the id and handles the wrappers,
    else 'gymnasium'. Raises ``ImportError`` when 'envpool' is asked for and missing."""
    if settings.backend == 'envpool':
        if not envpool_available():
            raise ImportError(ENVPOOL_MISSING)
        return 'envpool'
    if settings.backend == 'gymnasium':
        return 'gymnasium'
    wrappers_fit = all(spec.name in ENVPOOL_WRAPPERS for spec in settings.wrappers)
    return 'envpool' if wrappers_fit and envpool_ships(settings.env_id) else 'gymnasium'


def make_vector_env(env_cfg: Mapping[str, Any], num_envs: int, seed: int, for_eval: bool = False) -> VectorEnvType:
    """``num_envs`` envs of ``env_cfg['env_id']`` as one ``VectorEnv``. ``seed`` seeds EnvPool's envs as it
    builds them; on every backend ``reset(seed)`` (re)seeds env ``i`` from ``seed`` and ``i`` and replays the same
    episodes for the same seed.

    ``env_cfg`` is the run's ``env`` section (keys in docs/envs.md); ``for_eval`` turns off the training-only
    Atari settings (``episodic_life``, ``reward_clip``) so evaluation sees whole games and true returns.
    Bad keys raise ``ValueError`` naming them, a missing optional package ``ImportError`` with its extra.
    """
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise ValueError(f'make_vector_env: num_envs must be a positive int, got {num_envs!r}')
    settings = read_settings(env_cfg, for_eval)
    if choose_backend(settings) == 'envpool':
        return EnvPoolVectorEnv(settings, num_envs, seed)
    asynchronous = settings.vectorization_mode == 'async' and num_envs > 1
    return GymnasiumVectorEnv(settings, num_envs, asynchronous=asynchronous)
