"""A short serial DQN run on the generic ``gymnasium`` env type, its envs in subprocesses: no env module needed."""

from __future__ import annotations

import pytest
from easydict import EasyDict

from ding.entry import serial_pipeline


@pytest.mark.slow
def test_serial_dqn_trains_on_a_gymnasium_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main = EasyDict(
        exp_name='acrobot_dqn',
        env=dict(
            env_id='Acrobot-v1',
            max_episode_steps=100,
            wrappers=['obs_norm'],
            collector_env_num=2,
            evaluator_env_num=2,
            n_evaluator_episode=2,
            stop_value=0,
        ),
        policy=dict(
            cuda=False,
            model=dict(obs_shape=6, action_shape=3, encoder_hidden_size_list=[64, 64]),
            learn=dict(batch_size=32, learning_rate=0.001),
            collect=dict(n_sample=32),
            eval=dict(evaluator=dict(eval_freq=20)),
            other=dict(replay_buffer=dict(replay_buffer_size=2000)),
        ),
    )
    create = EasyDict(env=dict(type='gymnasium'), env_manager=dict(type='subprocess'), policy=dict(type='dqn'))
    policy = serial_pipeline((main, create), seed=0, max_env_step=1000)
    assert policy is not None
    saved = (tmp_path / 'acrobot_dqn' / 'total_config.py').read_text()
    assert "'type': 'gymnasium'" in saved or "type='gymnasium'" in saved
    assert list((tmp_path / 'acrobot_dqn' / 'ckpt').glob('iteration_*.safetensors'))
