"""The EnvPool backend: its thread pool stops on close, reset rebuilds it with the new seed, and the Atari
settings it is given (training vs evaluation)."""

from __future__ import annotations

import numpy as np
import pytest

from ding.envs.vector import EnvPoolVectorEnv, make_vector_env, read_settings
from ding.envs.vector.envpool_env import envpool_options


def thread_count() -> int:
    with open('/proc/self/status') as f:
        return next(int(line.split()[1]) for line in f if line.startswith('Threads:'))


def test_close_stops_envpools_threads():
    before = thread_count()
    env = make_vector_env(dict(env_id='CartPole-v1', envpool_kwargs=dict(num_threads=2)), 4, 0)
    try:
        env.reset(seed=0)
        env.step(np.zeros(4))
        assert thread_count() >= before + 2
    finally:
        env.close()
    assert thread_count() == before
    env.close()


def test_send_before_reset_is_an_error():
    env = make_vector_env(dict(env_id='CartPole-v1'), 2, 0)
    try:
        with pytest.raises(RuntimeError, match=r'reset\(seed\)'):
            env.send(np.zeros(2))
    finally:
        env.close()


def test_atari_settings_are_on_for_training_and_off_for_evaluation():
    cfg = dict(env_id='ALE/Pong-v5', envpool_kwargs=dict(use_fire_reset=False))
    train = envpool_options(read_settings(cfg, for_eval=False), 8)
    evaluate = envpool_options(read_settings(cfg, for_eval=True), 8)
    assert train['episodic_life'] and train['reward_clip'] and train['use_fire_reset'] is False
    assert not evaluate['episodic_life'] and not evaluate['reward_clip']
    assert train['frame_skip'] == 4 and train['stack_num'] == 4 and train['noop_max'] == 30
    assert (train['img_height'], train['img_width'], train['gray_scale']) == (84, 84, True)
    assert envpool_options(read_settings(dict(cfg, stack_num=2), False), 8)['stack_num'] == 2


def test_pong_frames_are_stacked_uint8():
    env = make_vector_env(dict(env_id='ALE/Pong-v5'), 2, 0)
    try:
        assert isinstance(env, EnvPoolVectorEnv)
        assert (env.observation_shape, env.observation_dtype, env.action_num) == ((4, 84, 84), np.uint8, 6)
        obs = env.reset(seed=0)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        obs, reward, _, _ = env.step(np.array([0, 1]))
        assert obs.dtype == np.uint8 and reward.dtype == np.float32
    finally:
        env.close()
