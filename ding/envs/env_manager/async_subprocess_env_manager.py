"""An env manager that steps envs as they become ready: for envs with uneven step times, where waiting for the
slowest env of every step leaves the others idle (benchmarks/uneven_envs.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ding.envs.env.base_env import BaseEnv, BaseEnvTimestep
from ding.utils import ENV_MANAGER_REGISTRY

from .subprocess_env_manager import SubprocessEnvManager


@ENV_MANAGER_REGISTRY.register('async_subprocess')
class AsyncSubprocessEnvManager(SubprocessEnvManager):
    """``SubprocessEnvManager`` whose ``step`` returns as soon as ``wait_num`` of the envs stepping have answered
    (every answer there by then included); the others go on stepping and answer in a later ``step``. So ``step``
    returns timesteps for some envs, not always those it was given, and ``ready_obs`` holds only the envs that wait
    for an action; ``in_flight`` counts the others, and ``step({})`` waits for them without sending anything.
    Whenever envs are stepping, ``step`` returns with at least one env ready (or all envs done).

    Extra config key: ``wait_num`` (None: half the envs, at least 1). ``step_timeout`` counts from the start of each
    wait. A reset drops the answers of the envs it resets that are still stepping.
    """

    config = dict(SubprocessEnvManager.config, wait_num=None)

    def __init__(self, env_fn: Sequence[Callable[[], BaseEnv]], cfg: dict | None = None) -> None:
        super().__init__(env_fn, cfg)
        wait_num = self._cfg.wait_num
        if wait_num is None:
            wait_num = max(1, self._env_num // 2)
        if not isinstance(wait_num, int) or isinstance(wait_num, bool) or not 1 <= wait_num <= self._env_num:
            raise ValueError(
                f'async_subprocess env manager: wait_num must be an int in [1, {self._env_num}], got {wait_num!r}'
            )
        self._wait_num = wait_num
        self._stepping: dict[int, Any] = {}  # env id -> the observation it is being stepped from

    @property
    def wait_num(self) -> int:
        """How many stepping envs ``step`` waits for."""
        return self._wait_num

    @property
    def in_flight(self) -> int:
        """How many envs are stepping (sent an action, not answered yet)."""
        return len(self._stepping)

    def step(self, actions: dict[int, Any]) -> dict[int, BaseEnvTimestep]:
        if self._closed:
            self._check_closed()
        replies, sent = self._send_steps(actions)
        for env_id in sent:
            self._stepping[env_id] = self._ready_obs.pop(env_id)
        timesteps = self._finish_steps(list(replies), replies, self._ready_obs)  # sends that failed
        while self._stepping:
            need = min(self._wait_num, len(self._stepping))
            answers = self._gather(list(self._stepping), self._step_timeout, min_count=need)
            last_obs = {env_id: self._stepping.pop(env_id) for env_id in answers}
            timesteps.update(self._finish_steps(list(answers), answers, last_obs))
            if self._ready_obs or self.done:
                break
        return timesteps

    def _reset_envs(self, env_ids: list[int]) -> None:
        dropped = [env_id for env_id in env_ids if env_id in self._stepping]
        if dropped:
            self._gather(dropped, self._step_timeout)  # answers of steps the reset overrides
            for env_id in dropped:
                del self._stepping[env_id]
        super()._reset_envs(env_ids)

    def close(self) -> None:
        self._stepping.clear()
        super().close()
