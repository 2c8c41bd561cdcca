"""The as-ready env manager (``type='async_subprocess'``): ``step`` returns once ``wait_num`` stepping envs have
answered, so a fast env is not held back by a slow one; real worker processes and real waits."""

from __future__ import annotations

import time
from functools import partial

import numpy as np
import pytest
from easydict import EasyDict

from ding.entry import serial_pipeline
from ding.envs import AsyncSubprocessEnvManager, BaseEnv, BaseEnvTimestep, create_env_manager
from ding.worker.collector import EpisodeSerialCollector


class DelayEnv(BaseEnv):
    """Each step sleeps ``delay`` seconds; the observation counts the env's steps; 5-step episodes."""

    def __init__(self, delay: float) -> None:
        super().__init__({})
        self._delay, self._t = delay, 0

    def reset(self) -> np.ndarray:
        self._t = 0
        return np.zeros(1, dtype=np.float32)

    def step(self, action) -> BaseEnvTimestep:
        time.sleep(self._delay)
        self._t += 1
        done = self._t >= 5
        info = {'eval_episode_return': float(self._t)} if done else {}
        return BaseEnvTimestep(np.array([self._t], dtype=np.float32), np.ones(1, dtype=np.float32), done, info)

    def seed(self, seed: int, dynamic_seed: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f'DelayEnv({self._delay})'

    observation_space = action_space = reward_space = None


def slow_and_fast(**cfg) -> AsyncSubprocessEnvManager:
    envs = create_env_manager(
        dict(type='async_subprocess', shared_memory=False, **cfg), [partial(DelayEnv, 0.5), partial(DelayEnv, 0.0)]
    )
    envs.seed(0)
    envs.launch()
    return envs


def test_a_fast_env_steps_while_a_slow_one_is_still_stepping():
    envs = slow_and_fast(wait_num=1)
    try:
        assert isinstance(envs, AsyncSubprocessEnvManager)
        start = time.perf_counter()
        timesteps = envs.step({0: 0, 1: 0})
        assert list(timesteps) == [1] and envs.in_flight == 1 and list(envs.ready_obs) == [1]
        fast_steps = 1
        while 0 not in timesteps:  # the slow env's one step takes 0.5 s; the fast env goes on meanwhile
            timesteps = envs.step(dict.fromkeys(envs.ready_obs.keys() - {0}, 0))
            fast_steps += 1 in timesteps
        assert fast_steps > 10 and timesteps[0].obs[0] == 1.0  # the slow env's step, answered at last
        assert time.perf_counter() - start < 2.0
    finally:
        envs.close()


def test_step_without_actions_waits_for_the_envs_stepping():
    envs = slow_and_fast(wait_num=1)
    try:
        assert list(envs.step({0: 0, 1: 0})) == [1] and envs.in_flight == 1
        timesteps = envs.step({})
        assert list(timesteps) == [0] and envs.in_flight == 0 and envs.ready_obs.keys() == {0, 1}
    finally:
        envs.close()


def test_a_reset_drops_the_steps_in_flight():
    envs = slow_and_fast(wait_num=1)
    try:
        envs.step({0: 0, 1: 0})
        assert envs.in_flight == 1
        envs.reset()
        assert envs.in_flight == 0 and {k: float(v[0]) for k, v in envs.ready_obs.items()} == {0: 0.0, 1: 0.0}
    finally:
        envs.close()


def test_wait_num_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r'wait_num must be an int in \[1, 2\], got 3'):
        create_env_manager(dict(type='async_subprocess', wait_num=3), [partial(DelayEnv, 0.0)] * 2)


@pytest.mark.slow
def test_serial_dqn_collects_and_evaluates_through_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main = EasyDict(
        exp_name='async_manager_dqn',
        env=dict(env_id='CartPole-v1', collector_env_num=4, evaluator_env_num=3, n_evaluator_episode=3, stop_value=500),
        policy=dict(
            cuda=False,
            model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[32, 32]),
            learn=dict(batch_size=32),
            collect=dict(n_sample=32),
            eval=dict(evaluator=dict(eval_freq=20)),
        ),
    )
    create = EasyDict(
        env=dict(type='gymnasium'), env_manager=dict(type='async_subprocess', wait_num=1), policy=dict(type='dqn')
    )
    serial_pipeline((main, create), seed=0, max_env_step=600)
    assert list((tmp_path / 'async_manager_dqn' / 'ckpt').glob('iteration_*.safetensors'))


def test_the_episode_collector_refuses_it():
    envs = create_env_manager(dict(type='async_subprocess'), [partial(DelayEnv, 0.0)] * 2)
    try:
        with pytest.raises(ValueError, match="env.manager.type='subprocess'"):
            EpisodeSerialCollector(EasyDict(EpisodeSerialCollector.default_config()), env=envs)
    finally:
        envs.close()
