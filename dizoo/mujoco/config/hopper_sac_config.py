"""MuJoCo Hopper SAC on the serial pipeline, through the generic ``gymnasium`` env type (no env module):
gymnasium's ``Hopper-v5`` (the ``mujoco`` package: ``pip install 'ding[mujoco]'``) with running observation
normalisation (the ``obs_norm`` wrapper). Run with ``ding -m serial -c dizoo/mujoco/config/hopper_sac_config.py -s 0``.

Hyper-parameters after DI-engine's Hopper SAC config (256-wide networks, 10000 random steps first, one update per
collected step); fewer collector envs for a small machine. Episodes end at 1000 steps (a truncation, which
bootstraps) or when the hopper falls (a termination)."""

from easydict import EasyDict

hopper_sac_config = dict(
    exp_name='hopper_sac_seed0',
    env=dict(
        env_id='Hopper-v5',
        wrappers=['obs_norm'],
        act_scale=True,  # the policy acts in [-1, 1]; the env scales to the action bounds
        collector_env_num=1,
        evaluator_env_num=4,
        n_evaluator_episode=4,
        stop_value=6000,
    ),
    policy=dict(
        cuda=False,
        random_collect_size=10000,
        model=dict(
            obs_shape=11,
            action_shape=3,
            twin_critic=True,
            action_space='reparameterization',
            actor_head_hidden_size=256,
            critic_head_hidden_size=256,
        ),
        learn=dict(
            update_per_collect=1,
            batch_size=256,
            learning_rate_q=0.001,
            learning_rate_policy=0.001,
            learning_rate_alpha=0.0003,
            target_theta=0.005,
            discount_factor=0.99,
            auto_alpha=False,
            alpha=0.2,
        ),
        collect=dict(n_sample=1),
        eval=dict(evaluator=dict(eval_freq=5000)),
        other=dict(replay_buffer=dict(replay_buffer_size=1000000)),
    ),
)
hopper_sac_config = EasyDict(hopper_sac_config)
main_config = hopper_sac_config

hopper_sac_create_config = dict(
    env=dict(type='gymnasium'),
    env_manager=dict(type='subprocess'),
    policy=dict(type='sac'),
    replay_buffer=dict(type='naive'),
)
hopper_sac_create_config = EasyDict(hopper_sac_create_config)
create_config = hopper_sac_create_config

if __name__ == '__main__':
    from ding.entry import serial_pipeline

    serial_pipeline((main_config, create_config), seed=0)
