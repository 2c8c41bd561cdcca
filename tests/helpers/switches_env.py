"""A tiny gymnasium env with a MultiDiscrete action space, made by the id
``'tests.helpers.switches_env:Switches-v0'`` (gymnasium imports this module first, in any process)."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces


class Switches(gymnasium.Env):
    """Three switches of 3, 2 and 4 positions; the action sets them all; the reward counts the switches set to
    their target (the observation, float64, holds the targets); 4 steps an episode."""

    action_space = spaces.MultiDiscrete([3, 2, 4])
    observation_space = spaces.Box(low=0.0, high=3.0, shape=(3,), dtype=np.float64)

    def __init__(self) -> None:
        self.target = np.zeros(3, dtype=np.int64)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.target = self.np_random.integers(0, self.action_space.nvec)
        self.t = 0
        return self.target.astype(np.float64), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        assert isinstance(action, np.ndarray) and action.shape == (3,), action
        self.t += 1
        reward = float(np.sum(action == self.target))
        return self.target.astype(np.float64), reward, self.t >= 4, False, {}


gymnasium.register('Switches-v0', entry_point=Switches)
