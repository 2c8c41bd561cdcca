"""CartPole R2D2 (a recurrent DQN on stored sequences). Run with
``ding -m serial -c dizoo/classic_control/cartpole/config/cartpole_r2d2_config.py -s 0``.

With ``env.wrappers=['mask_velocity']`` and ``policy.model.obs_shape=2`` the velocities are hidden and only the
LSTM's memory can recover them (``benchmarks/r2d2_memory.py``)."""

from easydict import EasyDict

cartpole_r2d2_config = dict(
    exp_name='cartpole_r2d2_seed0',
    env=dict(
        collector_env_num=8,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=195,
    ),
    policy=dict(
        cuda=False,
        priority=True,
        priority_IS_weight=True,
        model=dict(
            obs_shape=4,
            action_shape=2,
            encoder_hidden_size_list=[64, 64],
        ),
        discount_factor=0.99,
        nstep=3,
        burnin_step=4,
        learn_unroll_len=16,
        learn=dict(
            update_per_collect=4,
            batch_size=32,
            learning_rate=0.001,
            target_update_freq=100,
            value_rescale=True,
        ),
        collect=dict(n_sample=16, env_num=8),
        eval=dict(
            env_num=5,
            evaluator=dict(eval_freq=40),
        ),
        other=dict(
            eps=dict(
                type='exp',
                start=0.95,
                end=0.05,
                decay=10000,
            ),
            replay_buffer=dict(
                replay_buffer_size=5000,
            ),
        ),
    ),
)
cartpole_r2d2_config = EasyDict(cartpole_r2d2_config)
main_config = cartpole_r2d2_config

cartpole_r2d2_create_config = dict(
    env=dict(
        type='cartpole',
        import_names=['dizoo.classic_control.cartpole.envs.cartpole_env'],
    ),
    env_manager=dict(type='base'),
    policy=dict(type='r2d2'),
    replay_buffer=dict(type='advanced'),
)
cartpole_r2d2_create_config = EasyDict(cartpole_r2d2_create_config)
create_config = cartpole_r2d2_create_config

if __name__ == '__main__':
    from ding.entry import serial_pipeline

    serial_pipeline((main_config, create_config), seed=0)
