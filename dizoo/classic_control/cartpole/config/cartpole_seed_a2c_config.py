"""CartPole SEED A2C / IMPALA: actor processes step the envs, the learner acts for all of them (central
inference), assembles unrolls per actor and trains on them with V-trace. Run with
``ding -m seed -c dizoo/classic_control/cartpole/config/cartpole_seed_a2c_config.py -s 0``."""

from easydict import EasyDict

cartpole_seed_a2c_config = dict(
    exp_name='cartpole_seed_a2c_seed0',
    env=dict(
        env_id='CartPole-v1',
        backend='envpool',
        evaluator_env_num=8,
        n_evaluator_episode=8,
        stop_value=195,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=4,
            action_shape=2,
            encoder_hidden_size_list=[64, 64],
            actor_head_hidden_size=64,
            critic_head_hidden_size=64,
        ),
        learn=dict(
            batch_size=2,  # unrolls per learner batch
            learning_rate=0.003,
            optim_type='adam',
            value_weight=0.5,
            entropy_weight=0.01,
            grad_norm=0.5,
            discount_factor=0.9,
            learner=dict(hook=dict(save_ckpt_after_iter=1000)),
        ),
        eval=dict(evaluator=dict(eval_freq=25)),
        seed=dict(
            actor_num=2,
            env_per_actor=8,
            max_batch=16,
            max_wait_us=500,
            unroll_len=10,
            queue_size=2,  # short: an unroll waits little, so the policy lag stays low
        ),
    ),
)
cartpole_seed_a2c_config = EasyDict(cartpole_seed_a2c_config)
main_config = cartpole_seed_a2c_config

cartpole_seed_a2c_create_config = dict(policy=dict(type='impala'))
cartpole_seed_a2c_create_config = EasyDict(cartpole_seed_a2c_create_config)
create_config = cartpole_seed_a2c_create_config
