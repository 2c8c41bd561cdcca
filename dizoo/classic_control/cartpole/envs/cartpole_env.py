"""CartPole (gymnasium 'CartPole-v0': 200-step episodes) as a registered ding env."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
from easydict import EasyDict

from ding.envs.env.ding_env_wrapper import DingEnvWrapper
from ding.utils import ENV_REGISTRY


@ENV_REGISTRY.register('cartpole')
class CartPoleEnv(DingEnvWrapper):
    """obs float32 (4,), action Discrete(2), reward float32 (1,) in [0, 1]; the gymnasium env is built lazily
    on first use. Config keys: ``env_id`` ('CartPole-v0'), ``max_episode_steps`` (None: 200)."""

    config = dict(env_id='CartPole-v0', max_episode_steps=None)

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(copy.deepcopy(cls.config))

    def __init__(self, cfg: dict | None = None, caller: str = 'collector') -> None:
        merged = self.default_config()
        merged.update(cfg or {})
        from gymnasium import spaces

        self._reward_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        super().__init__(cfg=merged, caller=caller)

    def _make_env(self) -> Any:
        import gymnasium

        kwargs = {'disable_env_checker': True}  # actions are converted by the wrapper already
        if self._cfg.get('max_episode_steps') is not None:
            kwargs['max_episode_steps'] = int(self._cfg.max_episode_steps)
        with warnings.catch_warnings():
            # gymnasium flags v0 as outdated; v0's 200-step limit is what the dizoo config's stop value assumes
            warnings.simplefilter('ignore', DeprecationWarning)
            return gymnasium.make(self._cfg.env_id, **kwargs)

    def __repr__(self) -> str:
        return 'DI-engine CartPole Env'
