"""CartPole SEED DQN: actor processes step the envs, the learner acts for all of them (central inference)
and keeps the replay buffer. Run with
``ding -m seed -c dizoo/classic_control/cartpole/config/cartpole_seed_dqn_config.py -s 0``."""

from easydict import EasyDict

cartpole_seed_dqn_config = dict(
    exp_name='cartpole_seed_dqn_seed0',
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
            encoder_hidden_size_list=[128, 128, 64],
            dueling=True,
        ),
        nstep=1,  # 3 was measured too (benchmarks/seed_solve.py --dqn-nstep 1 3): more env steps to solve, no faster
        discount_factor=0.97,
        learn=dict(
            batch_size=64,
            learning_rate=0.001,
            update_per_collect=8,  # DQN updates per round of new transitions (one chunk or more)
            target_update_freq=100,
        ),
        eval=dict(evaluator=dict(eval_freq=200)),
        other=dict(replay_buffer=dict(replay_buffer_size=20000)),
        seed=dict(
            actor_num=2,
            env_per_actor=8,
            max_batch=16,
            max_wait_us=500,
            unroll_len=8,  # transitions reach the learner in chunks of 8 steps x 8 envs
            queue_size=2,
            eps=0.4,
            eps_alpha=3.0,  # actor 0 explores with 0.4, actor 1 with 0.4 ** 4
        ),
    ),
)
cartpole_seed_dqn_config = EasyDict(cartpole_seed_dqn_config)
main_config = cartpole_seed_dqn_config

cartpole_seed_dqn_create_config = dict(policy=dict(type='dqn'))
cartpole_seed_dqn_create_config = EasyDict(cartpole_seed_dqn_create_config)
create_config = cartpole_seed_dqn_create_config
