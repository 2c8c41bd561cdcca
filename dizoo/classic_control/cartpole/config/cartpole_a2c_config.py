"""CartPole A2C (on-policy). Run with
``ding -m serial_onpolicy -c dizoo/classic_control/cartpole/config/cartpole_a2c_config.py -s 0``."""

from easydict import EasyDict

cartpole_a2c_config = dict(
    exp_name='cartpole_a2c_seed0',
    env=dict(
        collector_env_num=8,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=195,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=4,
            action_shape=2,
            encoder_hidden_size_list=[128, 128, 64],
        ),
        learn=dict(
            batch_size=40,
            learning_rate=0.001,
            entropy_weight=0.01,
        ),
        collect=dict(
            n_sample=80,
            discount_factor=0.9,
            gae_lambda=0.95,
        ),
        eval=dict(
            evaluator=dict(
                eval_freq=200,
            )
        ),
    ),
)
cartpole_a2c_config = EasyDict(cartpole_a2c_config)
main_config = cartpole_a2c_config

cartpole_a2c_create_config = dict(
    env=dict(
        type='cartpole',
        import_names=['dizoo.classic_control.cartpole.envs.cartpole_env'],
    ),
    env_manager=dict(type='base'),
    policy=dict(type='a2c'),
)
cartpole_a2c_create_config = EasyDict(cartpole_a2c_create_config)
create_config = cartpole_a2c_create_config

if __name__ == '__main__':
    from ding.entry import serial_pipeline_onpolicy

    serial_pipeline_onpolicy((main_config, create_config), seed=0)
