"""Envs with uneven step times: the subprocess env manager (``step`` waits for every env it was given) against the
as-ready one (``async_subprocess``: ``step`` returns once ``wait_num`` envs answered).

Each env's step takes a random time (uniform in [0.2, 1.8] x ``--mean-ms``), either sleeping (an env that waits on
something else: a remote simulator, a game server) or spinning the CPU (a local simulator: MuJoCo, ALE). The table
gives each manager's env steps per second and the ceiling: every env stepping back to back, ``envs / mean`` for
sleeping envs, ``min(envs, cores) / mean`` for spinning ones (the CPU is the limit). Usage::

    python benchmarks/uneven_envs.py --envs 2 4 8 --mean-ms 5 --steps 3000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ding.envs import BaseEnv, BaseEnvTimestep, create_env_manager  # noqa: E402


class UnevenEnv(BaseEnv):
    """Endless episodes of 100 steps; each step lasts a random time, slept or spun."""

    def __init__(self, mean_s: float, spin: bool) -> None:
        super().__init__({})
        self._mean, self._spin, self._rng, self._t = mean_s, spin, np.random.default_rng(), 0

    def reset(self) -> np.ndarray:
        self._t = 0
        return np.zeros(4, dtype=np.float32)

    def step(self, action) -> BaseEnvTimestep:
        duration = self._mean * self._rng.uniform(0.2, 1.8)
        if self._spin:
            end = time.perf_counter() + duration
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(duration)
        self._t += 1
        done = self._t >= 100
        info = {'eval_episode_return': float(self._t)} if done else {}
        return BaseEnvTimestep(np.zeros(4, dtype=np.float32), np.array([1.0], dtype=np.float32), done, info)

    def seed(self, seed: int, dynamic_seed: bool = True) -> None:
        self._rng = np.random.default_rng(seed)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return 'UnevenEnv'

    observation_space = action_space = reward_space = None


def manager_rate(manager: str, env_num: int, mean_s: float, spin: bool, steps: int) -> float:
    cfg = dict(type=manager, wait_num=1) if manager == 'async_subprocess' else dict(type=manager)
    envs = create_env_manager(cfg, [partial(UnevenEnv, mean_s, spin)] * env_num)
    try:
        envs.seed(0)
        envs.launch()
        done, start = 0, time.perf_counter()
        while done < steps:
            done += len(envs.step(dict.fromkeys(envs.ready_obs, 0)))
        return done / (time.perf_counter() - start)
    finally:
        envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--envs', type=int, nargs='+', default=[2, 4, 8])
    parser.add_argument('--mean-ms', type=float, default=5.0)
    parser.add_argument('--steps', type=int, default=3000)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    mean_s = args.mean_ms / 1000
    print(f'{cores} cores, mean step {args.mean_ms} ms (uniform 0.2x-1.8x)')
    print('| envs | step | subprocess (env steps/s) | async_subprocess, wait_num=1 | ceiling |')
    print('|---|---|---|---|---|')
    for env_num in args.envs:
        for spin in (False, True):
            lockstep = manager_rate('subprocess', env_num, mean_s, spin, args.steps)
            as_ready = manager_rate('async_subprocess', env_num, mean_s, spin, args.steps)
            ceiling = (min(env_num, cores) if spin else env_num) / mean_s
            kind = 'spins the CPU' if spin else 'sleeps'
            print(f'| {env_num} | {kind} | {lockstep:.0f} | {as_ready:.0f} | {ceiling:.0f} |')


if __name__ == '__main__':
    main()
