"""Pendulum with distributed evolution strategies (OpenAI-ES, continuous actions). Run with
``ding -m es -c dizoo/classic_control/pendulum/config/pendulum_es_config.py -s 0``.

A deterministic tanh-bounded actor (the ``vac`` mean; the env scales [-1, 1] to the [-2, 2] torque); every
episode is 200 steps, so one update of 20 antithetic pairs costs 8000 env steps. With 2 workers, seeds 0 / 1 / 2
solved (best evaluation -189 / -240 / -200, from about -1250) in 65 / 205 / 155 updates, 75 / 140 / 73 s of run
wall time (benchmarks/NOTES.md).
"""

from easydict import EasyDict

_pendulum_env = dict(type='pendulum', import_names=['dizoo.classic_control.pendulum.envs.pendulum_env'])

pendulum_es_config = dict(
    exp_name='pendulum_es_seed0',
    env=dict(
        collector_env_num=1,  # unused: ES workers run their own env (policy.collect.env)
        evaluator_env_num=5,
        act_scale=True,
        n_evaluator_episode=5,
        stop_value=-250,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=3,
            action_shape=1,
            action_space='continuous',
            bound_type='tanh',
            encoder_hidden_size_list=[32],
            actor_head_layer_num=0,
            critic_head_layer_num=0,
        ),
        noise_table=dict(seed=0, size=1 << 20),
        learn=dict(
            population_size=20,
            sigma=0.1,
            antithetic=True,
            rank_shaping=True,
            learning_rate=0.1,
            weight_decay=0.005,
            max_partial_lag=2,
        ),
        collect=dict(env=dict(_pendulum_env, act_scale=True)),
        eval=dict(evaluator=dict(eval_freq=5)),
        es_server=dict(worker_num=2),
    ),
)
pendulum_es_config = EasyDict(pendulum_es_config)
main_config = pendulum_es_config

pendulum_es_create_config = dict(
    env=dict(_pendulum_env),
    env_manager=dict(type='base'),
    policy=dict(type='es'),
)
pendulum_es_create_config = EasyDict(pendulum_es_create_config)
create_config = pendulum_es_create_config

if __name__ == '__main__':
    from ding.entry import es_pipeline

    es_pipeline((main_config, create_config), seed=0)
