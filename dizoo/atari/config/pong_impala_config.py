"""Atari Pong IMPALA on the async (actor-learner) pipeline, with EnvPool and the standard Atari preprocessing
(no-op reset, frame skip 4 with max-pooling, 84x84 grey, 4-frame stack; episodic life and reward clipping for
training, whole games and true returns for evaluation; docs/envs.md). Needs ``pip install 'ding[envpool]'``.
Run with ``ding -m async -c dizoo/atari/config/pong_impala_config.py -s 0``."""

from easydict import EasyDict

pong_impala_config = dict(
    exp_name='pong_impala_seed0',
    env=dict(
        env_id='ALE/Pong-v5',
        backend='envpool',
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
        repeat_action_probability=0.0,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=[4, 84, 84],
            action_shape=6,
            encoder_hidden_size_list=None,  # the Nature CNN
            actor_head_hidden_size=512,
            critic_head_hidden_size=512,
            lstm_hidden_size=None,
        ),
        learn=dict(
            batch_size=4,  # unrolls per learner batch (each of env_per_actor / 2 envs)
            learning_rate=0.0006,
            optim_type='rmsprop',
            alpha=0.99,
            eps=0.01,
            value_weight=0.5,
            entropy_weight=0.01,
            grad_norm=40.0,
            discount_factor=0.99,
            lambda_=1.0,
            rho_clip_ratio=1.0,
            c_clip_ratio=1.0,
            rho_pg_clip_ratio=1.0,
            learner=dict(hook=dict(save_ckpt_after_iter=1000)),
        ),
        eval=dict(evaluator=dict(eval_freq=1000)),
        async_actor=dict(
            actor_num=2,
            env_per_actor=8,
            unroll_len=20,
            # short: Pong is learner-bound, so a longer queue only holds older trajectories (8: lag 4.5 with batches
            # of 2 unrolls, at the same env steps/s; benchmarks/NOTES.md)
            trajectory_queue_size=2,
            staging_queue_size=1,
            updates_per_batch=1,
            double_buffer=True,
        ),
    ),
)
pong_impala_config = EasyDict(pong_impala_config)
main_config = pong_impala_config

pong_impala_create_config = dict(policy=dict(type='impala'))
pong_impala_create_config = EasyDict(pong_impala_create_config)
create_config = pong_impala_create_config
