"""dizoo's Pong IMPALA config: its envs give the frames and actions its model expects (training and evaluation
settings), and it trains on the async pipeline."""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest
from easydict import EasyDict

from ding.entry import async_pipeline
from ding.entry.async_entry import check_async_config
from ding.envs.vector import EnvPoolVectorEnv, make_vector_env
from ding.envs.vector.envpool_env import envpool_options
from ding.envs.vector.settings import read_settings
from dizoo.atari.config.pong_impala_config import create_config, main_config


def test_the_env_section_gives_the_models_frames_and_actions():
    check_async_config(main_config)
    env = make_vector_env(main_config.env, 2, seed=0)
    try:
        assert isinstance(env, EnvPoolVectorEnv)
        assert env.observation_shape == tuple(main_config.policy.model.obs_shape) and env.observation_dtype == np.uint8
        assert env.action_num == main_config.policy.model.action_shape
    finally:
        env.close()


def test_training_clips_rewards_and_ends_episodes_on_a_lost_life_evaluation_does_not():
    train = envpool_options(read_settings(main_config.env, for_eval=False), 8)
    evaluate = envpool_options(read_settings(main_config.env, for_eval=True), 8)
    assert train['episodic_life'] and train['reward_clip']
    assert not evaluate['episodic_life'] and not evaluate['reward_clip']
    for options in (train, evaluate):
        assert (options['frame_skip'], options['stack_num'], options['noop_max']) == (4, 4, 30)
        assert (options['img_height'], options['img_width'], options['gray_scale']) == (84, 84, True)


@pytest.mark.slow
def test_pong_trains_on_the_async_pipeline(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    cfg, create = copy.deepcopy(EasyDict(main_config)), copy.deepcopy(EasyDict(create_config))
    cfg.policy.eval.evaluator.eval_freq = 0  # a whole evaluation game takes minutes here
    cfg.policy.async_actor.update(env_per_actor=4, unroll_len=8)
    cfg.policy.learn.batch_size = 2
    async_pipeline((cfg, create), seed=0, max_train_iter=3)
    summary = [line for line in capsys.readouterr().err.splitlines() if line.startswith('[ding] ')][-1]
    assert 'not solved (max_train_iter reached)' in summary and 'train iters 3' in summary
    assert not [t for t in threading.enumerate() if t.name.startswith('ding-actor-')]
