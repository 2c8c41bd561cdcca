"""Pendulum TD3 (continuous actions, twin critics, target policy smoothing, delayed actor updates). Run with
``ding -m serial -c dizoo/classic_control/pendulum/config/pendulum_td3_config.py -s 0``.

DI-engine's Pendulum TD3 config with fewer collector envs; ``ignore_done`` is not needed here (Pendulum's
200-step time limit is a truncation, which bootstraps).
"""

from easydict import EasyDict

pendulum_td3_config = dict(
    exp_name='pendulum_td3_seed0',
    env=dict(
        collector_env_num=8,
        evaluator_env_num=5,
        act_scale=True,
        n_evaluator_episode=5,
        stop_value=-250,
    ),
    policy=dict(
        cuda=False,
        random_collect_size=1000,
        model=dict(
            obs_shape=3,
            action_shape=1,
            twin_critic=True,
            action_space='regression',
            actor_head_hidden_size=128,
            critic_head_hidden_size=128,
        ),
        learn=dict(
            update_per_collect=8,
            batch_size=128,
            learning_rate_actor=0.001,
            learning_rate_critic=0.001,
            target_theta=0.005,
            discount_factor=0.99,
            actor_update_freq=2,
            noise=True,
            noise_sigma=0.1,
            noise_range=dict(min=-0.5, max=0.5),
        ),
        collect=dict(n_sample=8, noise_sigma=0.1),
        eval=dict(evaluator=dict(eval_freq=400)),
        other=dict(replay_buffer=dict(replay_buffer_size=100000)),
    ),
)
pendulum_td3_config = EasyDict(pendulum_td3_config)
main_config = pendulum_td3_config

pendulum_td3_create_config = dict(
    env=dict(
        type='pendulum',
        import_names=['dizoo.classic_control.pendulum.envs.pendulum_env'],
    ),
    env_manager=dict(type='base'),
    policy=dict(type='td3'),
    replay_buffer=dict(type='naive'),
)
pendulum_td3_create_config = EasyDict(pendulum_td3_create_config)
create_config = pendulum_td3_create_config

if __name__ == '__main__':
    from ding.entry import serial_pipeline

    serial_pipeline((main_config, create_config), seed=0)
