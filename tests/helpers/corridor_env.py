"""A tiny deterministic gymnasium env that EnvPool does not ship: the vector-env tests make it by the id
``'tests.helpers.corridor_env:Corridor-v0'`` (gymnasium imports this module first, in any worker process)."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

LENGTH = 3


class Corridor(gymnasium.Env):
    """Walk right (action 1) or stay (action 0); reward 1 a step; the episode terminates on reaching
    ``LENGTH``. The observation is the position (of ``dtype``); ``reset`` starts at a seeded offset in ``[0, 0.5)``."""

    action_space = spaces.Discrete(2)

    def __init__(self, dtype: str = 'float32') -> None:
        self.observation_space = spaces.Box(low=0.0, high=LENGTH + 1.0, shape=(1,), dtype=np.dtype(dtype))
        self.position = 0.0
        self.offset = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.offset = float(self.np_random.uniform(0.0, 0.5))
        self.position = 0.0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.position += int(action)
        return self._obs(), 1.0, self.position >= LENGTH, False, {}

    def _obs(self) -> np.ndarray:
        return np.array([self.position + self.offset], dtype=self.observation_space.dtype)


gymnasium.register('Corridor-v0', entry_point=Corridor)
