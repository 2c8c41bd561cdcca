"""Pendulum (gymnasium 'Pendulum-v1': 200-step episodes) as a registered ding env."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from easydict import EasyDict

from ding.envs.env.ding_env_wrapper import DingEnvWrapper
from ding.utils import ENV_REGISTRY

# per-step reward of Pendulum lies in [-(pi^2 + 0.1 * 8^2 + 0.001 * 2^2), 0]
_MIN_REWARD = -(np.pi**2 + 0.1 * 64 + 0.001 * 4)


@ENV_REGISTRY.register('pendulum')
class PendulumEnv(DingEnvWrapper):
    """obs float32 (3,), action float32 (1,) in [-2, 2], reward float32 (1,).

    Config keys: ``act_scale`` (True, as in DI-engine's pendulum configs: the policy acts in [-1, 1] and the
    env scales to [-2, 2]; False: actions are taken as torques and clipped to [-2, 2]), ``env_id``
    ('Pendulum-v1'), ``max_episode_steps`` (None: 200). ``continuous=False`` (DI-engine's discretised
    variant) is not supported.
    """

    config = dict(env_id='Pendulum-v1', act_scale=True, continuous=True, max_episode_steps=None)

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(copy.deepcopy(cls.config))

    def __init__(self, cfg: dict | None = None, caller: str = 'collector') -> None:
        merged = self.default_config()
        merged.update(cfg or {})
        if not merged.continuous:
            raise ValueError('pendulum env config: continuous=False (discrete actions) is not supported')
        from gymnasium import spaces

        self._reward_space = spaces.Box(float(_MIN_REWARD), 0.0, shape=(1,), dtype=np.float32)
        super().__init__(cfg=merged, caller=caller)

    def _make_env(self) -> Any:
        import gymnasium

        kwargs = {'disable_env_checker': True}  # actions are converted and clipped by the wrapper already
        if self._cfg.get('max_episode_steps') is not None:
            kwargs['max_episode_steps'] = int(self._cfg.max_episode_steps)
        return gymnasium.make(self._cfg.env_id, **kwargs)

    def __repr__(self) -> str:
        return 'DI-engine Pendulum Env'
