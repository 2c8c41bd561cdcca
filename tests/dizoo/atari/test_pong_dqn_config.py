"""dizoo's Pong DQN config: the generic gymnasium env gives the frames and actions its model expects, and it
trains a few iterations on the serial pipeline."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from ding.entry import serial_pipeline
from ding.envs import GymnasiumEnv, get_vec_env_setting
from dizoo.atari.config.pong_dqn_config import create_config, main_config

pytest.importorskip('ale_py')


def test_the_envs_give_the_models_frames_and_actions():
    env_cfg = dict(main_config.env, type='gymnasium')
    env_fn, collector_cfgs, evaluator_cfgs = get_vec_env_setting(env_cfg)
    assert env_fn is GymnasiumEnv
    env = env_fn(cfg=collector_cfgs[0])
    try:
        env.seed(0)
        obs = env.reset()
        assert obs.shape == tuple(main_config.policy.model.obs_shape) and obs.dtype == np.uint8
        assert env.action_space.n == main_config.policy.model.action_shape
    finally:
        env.close()


@pytest.mark.slow
def test_a_few_iterations_train(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main = copy.deepcopy(main_config)
    main.env.update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1, max_episode_steps=50)
    main.policy.learn.update_per_collect = 2
    main.policy.collect.n_sample = 32
    main.policy.other.replay_buffer.replay_buffer_size = 500
    serial_pipeline((main, copy.deepcopy(create_config)), seed=0, max_train_iter=6)
    assert list((tmp_path / 'pong_dqn_seed0' / 'ckpt').glob('iteration_*.safetensors'))
