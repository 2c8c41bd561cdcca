"""Atari Pong DQN on the serial pipeline, through the generic ``gymnasium`` env type (no env module): ale-py's
``ALE/Pong-v5`` with the standard Atari preprocessing (no-op reset, frame skip 4 with max-pooling, 84x84 grey,
4-frame stack, FIRE after reset; episodic life and reward clipping for training, whole games and true returns for
evaluation; docs/envs.md) and the Nature CNN. Needs ``pip install 'ding[atari]'``.
Run with ``ding -m serial -c dizoo/atari/config/pong_dqn_config.py -s 0``.

The replay buffer holds uint8 frames: each transition keeps two [4, 84, 84] observations (56 KB), so the
100000 transitions below take about 5.6 GB of memory."""

from easydict import EasyDict

pong_dqn_config = dict(
    exp_name='pong_dqn_seed0',
    env=dict(
        env_id='ALE/Pong-v5',
        collector_env_num=8,
        evaluator_env_num=4,
        n_evaluator_episode=4,
        stop_value=20,
        # the standard Atari preprocessing (these are the defaults, spelled out)
        noop_max=30,
        frame_skip=4,
        stack_num=4,
        img_height=84,
        img_width=84,
        gray_scale=True,
        episodic_life=True,  # training only: evaluation plays whole games
        reward_clip=True,  # training only: evaluation reports true returns
        fire_reset=True,
        repeat_action_probability=0.0,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=[4, 84, 84],
            action_shape=6,
            encoder_hidden_size_list=None,  # the Nature CNN
        ),
        nstep=3,
        discount_factor=0.99,
        learn=dict(
            update_per_collect=10,
            batch_size=32,
            learning_rate=0.0001,
            target_update_freq=500,
        ),
        collect=dict(n_sample=96),
        eval=dict(evaluator=dict(eval_freq=4000)),
        other=dict(
            eps=dict(
                type='exp',
                start=1.0,
                end=0.05,
                decay=250000,
            ),
            replay_buffer=dict(replay_buffer_size=100000),
        ),
    ),
)
pong_dqn_config = EasyDict(pong_dqn_config)
main_config = pong_dqn_config

pong_dqn_create_config = dict(
    env=dict(type='gymnasium'),
    env_manager=dict(type='subprocess'),
    policy=dict(type='dqn'),
    replay_buffer=dict(type='deque'),
)
pong_dqn_create_config = EasyDict(pong_dqn_create_config)
create_config = pong_dqn_create_config

if __name__ == '__main__':
    from ding.entry import serial_pipeline

    serial_pipeline((main_config, create_config), seed=0)
