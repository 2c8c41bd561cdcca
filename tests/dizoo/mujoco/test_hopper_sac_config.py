"""dizoo's Hopper SAC config: gymnasium's MuJoCo Hopper through the generic env type gives the observations
(normalised) and actions its model expects, and SAC trains a few iterations on it."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from ding.entry import serial_pipeline
from ding.envs import get_vec_env_setting
from dizoo.mujoco.config.hopper_sac_config import create_config, main_config

pytest.importorskip('mujoco')


def test_the_env_gives_the_models_observations_and_actions():
    env_fn, collector_cfgs, _ = get_vec_env_setting(dict(main_config.env, type='gymnasium'))
    env = env_fn(cfg=collector_cfgs[0])
    try:
        env.seed(0)
        seen = [env.reset()]
        assert env.action_space.shape == (main_config.policy.model.action_shape,)
        for _ in range(20):
            timestep = env.step(np.zeros(3, dtype=np.float32))
            seen.append(timestep.obs)
            if timestep.done:
                break
        seen = np.stack(seen)
        assert seen.shape[1] == main_config.policy.model.obs_shape and seen.dtype == np.float32
        assert np.all(np.abs(seen) <= 10.0)  # normalised and clipped by obs_norm
    finally:
        env.close()


@pytest.mark.slow
def test_a_few_iterations_train(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main = copy.deepcopy(main_config)
    main.env.update(evaluator_env_num=1, n_evaluator_episode=1, max_episode_steps=50)
    main.policy.random_collect_size = 64
    main.policy.learn.batch_size = 32
    main.policy.other.replay_buffer.replay_buffer_size = 1000
    create = copy.deepcopy(create_config)
    create.env_manager.type = 'base'
    serial_pipeline((main, create), seed=0, max_train_iter=20)
    assert list((tmp_path / 'hopper_sac_seed0' / 'ckpt').glob('iteration_*.safetensors'))
