"""CartPole with distributed evolution strategies (OpenAI-ES). Run with
``ding -m es -c dizoo/classic_control/cartpole/config/cartpole_es_config.py -s 0``.

A 16-unit actor (115 parameters act; the 17 of the unused critic head of ``vac`` ride along); 10 antithetic
pairs per update, so one update costs 20 episodes. With 2 workers, seeds 0 / 1 / 2 solved in 38 / 72 / 18
updates, 84 / 109 / 54 s of run wall time on the shared 2-core machine (benchmarks/NOTES.md).
"""

from easydict import EasyDict

_cartpole_env = dict(type='cartpole', import_names=['dizoo.classic_control.cartpole.envs.cartpole_env'])

cartpole_es_config = dict(
    exp_name='cartpole_es_seed0',
    env=dict(
        collector_env_num=1,  # unused: ES workers run their own env (policy.collect.env)
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=195,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=4,
            action_shape=2,
            encoder_hidden_size_list=[16],
            actor_head_layer_num=0,
            critic_head_layer_num=0,
        ),
        noise_table=dict(seed=0, size=1 << 20),
        learn=dict(
            population_size=10,
            sigma=0.1,
            antithetic=True,
            rank_shaping=True,
            learning_rate=0.1,
            weight_decay=0.005,
            max_partial_lag=2,
        ),
        collect=dict(env=_cartpole_env),
        eval=dict(evaluator=dict(eval_freq=2)),
        es_server=dict(worker_num=2),
    ),
)
cartpole_es_config = EasyDict(cartpole_es_config)
main_config = cartpole_es_config

cartpole_es_create_config = dict(
    env=dict(_cartpole_env),
    env_manager=dict(type='base'),
    policy=dict(type='es'),
)
cartpole_es_create_config = EasyDict(cartpole_es_create_config)
create_config = cartpole_es_create_config

if __name__ == '__main__':
    from ding.entry import es_pipeline

    es_pipeline((main_config, create_config), seed=0)
