"""CartPole IMPALA on the async (actor-learner) pipeline. Run with
``ding -m async -c dizoo/classic_control/cartpole/config/cartpole_impala_config.py -s 0``."""

from easydict import EasyDict

cartpole_impala_config = dict(
    exp_name='cartpole_impala_seed0',
    env=dict(
        env_id='CartPole-v1',
        backend='envpool',
        # CartPole steps in nanoseconds: one EnvPool thread per actor's pool hands steps over faster than two
        envpool_kwargs=dict(num_threads=1),
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
            lstm_hidden_size=None,  # e.g. 64 for the LSTM core
        ),
        learn=dict(
            batch_size=2,  # unrolls per learner batch (2 solved seeds 0-4 more steadily than 1 or 4)
            learning_rate=0.003,
            optim_type='adam',
            value_weight=0.5,
            entropy_weight=0.01,
            grad_norm=0.5,
            discount_factor=0.9,
            lambda_=1.0,
            rho_clip_ratio=1.0,
            c_clip_ratio=1.0,
            rho_pg_clip_ratio=1.0,
            learner=dict(hook=dict(save_ckpt_after_iter=1000)),
        ),
        eval=dict(evaluator=dict(eval_freq=25)),
        async_actor=dict(
            # one actor thread stepping all 16 envs: on 2 cores a second actor thread slows the learner (each of its
            # torch calls waits for the GIL) far more than it adds (benchmarks/NOTES.md, #12 one actor thread)
            actor_num=1,
            env_per_actor=16,
            unroll_len=10,
            trajectory_queue_size=1,  # short: a trajectory waits little, so the policy lag stays low (~1.5)
            staging_queue_size=1,
            updates_per_batch=1,
            double_buffer=False,  # CartPole steps in microseconds: one inference on all envs beats two halves
        ),
    ),
)
cartpole_impala_config = EasyDict(cartpole_impala_config)
main_config = cartpole_impala_config

cartpole_impala_create_config = dict(policy=dict(type='impala'))
cartpole_impala_create_config = EasyDict(cartpole_impala_create_config)
create_config = cartpole_impala_create_config
