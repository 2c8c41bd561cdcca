"""Configs of the async pipeline for tests: CartPole with IMPALA, small and fast."""

from __future__ import annotations

import copy
from typing import Any

from easydict import EasyDict

CARTPOLE_IMPALA: dict[str, Any] = dict(
    exp_name='cartpole_impala_async',
    env=dict(env_id='CartPole-v1', backend='envpool', evaluator_env_num=4, n_evaluator_episode=4, stop_value=195),
    policy=dict(
        model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[64, 64]),
        learn=dict(
            batch_size=2,
            learning_rate=0.001,
            entropy_weight=0.01,
            learner=dict(hook=dict(log_show_after_iter=50, save_ckpt_after_iter=1000000)),
        ),
        async_actor=dict(actor_num=2, env_per_actor=8, unroll_len=20, trajectory_queue_size=8),
        eval=dict(evaluator=dict(eval_freq=100)),
    ),
)
CARTPOLE_IMPALA_CREATE: dict[str, Any] = dict(policy=dict(type='impala'))


def cartpole_impala(exp_name: str | None = None, **sections: dict[str, Any]) -> tuple[EasyDict, EasyDict]:
    """``(main_config, create_config)``; each keyword merges into the section it names, e.g.
    ``async_actor=dict(double_buffer=False)`` into ``policy.async_actor``, ``service=dict(...)`` at the top."""
    cfg = copy.deepcopy(CARTPOLE_IMPALA)
    if exp_name:
        cfg['exp_name'] = exp_name
    for name, values in sections.items():
        if name in ('env', 'service'):
            cfg.setdefault(name, {}).update(values)
        elif name in ('learn', 'eval', 'async_actor', 'model'):
            cfg['policy'].setdefault(name, {}).update(values)
        else:
            raise KeyError(f'cartpole_impala: no section {name!r}')
    return EasyDict(cfg), EasyDict(copy.deepcopy(CARTPOLE_IMPALA_CREATE))
