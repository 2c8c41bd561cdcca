"""The ``envpool`` backend of the generic gymnasium env type: one EnvPool env under ding's env interface, with
EnvPool's Atari preprocessing and ding's wrappers on top."""

from __future__ import annotations

import numpy as np
import pytest
from easydict import EasyDict

from ding.config import ConfigError, compile_config
from ding.envs import GymnasiumEnv

pytest.importorskip('envpool')


def make(is_train: bool = True, **cfg):
    return GymnasiumEnv(cfg={**cfg, 'backend': 'envpool', 'is_train': is_train})


def play(env, actions):
    obs = env.reset()
    rewards = [float(env.step(a).reward[0]) for a in actions]
    return obs, rewards


def test_a_seed_replays_the_same_episode():
    env = make(env_id='Hopper-v5')
    try:
        env.seed(7, dynamic_seed=False)
        actions = [np.full(3, 0.5, dtype=np.float32)] * 10
        first_obs, first_rewards = play(env, actions)
        again_obs, again_rewards = play(env, actions)
        assert first_obs.dtype == np.float32 and first_obs.shape == (11,)
        assert np.array_equal(first_obs, again_obs) and first_rewards == again_rewards
        env.seed(8, dynamic_seed=False)
        assert not np.array_equal(play(env, actions)[0], first_obs)
    finally:
        env.close()


def test_atari_uses_envpools_preprocessing_training_ends_on_a_lost_life():
    train, evaluate = make(env_id='ALE/Breakout-v5'), make(is_train=False, env_id='ALE/Breakout-v5')
    try:
        for env in (train, evaluate):
            env.seed(0)
            obs = env.reset()
            assert obs.dtype == np.uint8 and obs.shape == (4, 84, 84)
        lives = []
        for env in (train, evaluate):
            timestep = env.step(1)
            while not timestep.done:  # FIRE only: the ball is served after each lost life, the paddle stays still
                timestep = env.step(1)
            lives.append(int(timestep.info['lives']))
        assert lives == [4, 0]
    finally:
        train.close()
        evaluate.close()


def test_ding_wrappers_work_on_top():
    env = make(env_id='CartPole-v1', wrappers=['mask_velocity', dict(name='obs_norm', clip=3.0)])
    try:
        env.seed(0)
        obs = env.reset()
        assert obs.shape == (2,) and np.all(np.abs(obs) <= 3.0)
    finally:
        env.close()


def test_an_id_envpool_does_not_ship_is_refused_at_config_time():
    main = EasyDict(
        exp_name='envpool_check',
        env=dict(
            collector_env_num=1, evaluator_env_num=1, env_id='tests.helpers.switches_env:Switches-v0', backend='envpool'
        ),
        policy=dict(model=dict(obs_shape=2, action_shape=1)),
    )
    create = EasyDict(env=dict(type='gymnasium'), env_manager=dict(type='base'), policy=dict(type='dqn'))
    with pytest.raises(ConfigError, match="envpool does not ship 'tests.helpers.switches_env:Switches-v0'"):
        compile_config(main, create_cfg=create, auto=True, save_cfg=False)
