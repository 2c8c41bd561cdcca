"""Off-policy training on one machine: collect -> replay buffer -> learner, with periodic evaluation."""
from __future__ import annotations

import os
from functools import partial
from time import perf_counter
from typing import Any, Optional, Tuple, Union

import torch

from .pipeline_parts import build_serial_parts, load_input_config, finish_run


def serial_pipeline(
        input_cfg: Union[str, Tuple[dict, dict]],
        seed: int = 0,
        env_setting: Optional[list] = None,
        model: Optional[torch.nn.Module] = None,
        max_train_iter: Optional[int] = int(1e10),
        max_env_step: Optional[int] = int(1e10),
        dynamic_seed: Optional[bool] = True,
        resume: Optional[str] = None,
) -> Any:
    """Train an off-policy algorithm (e.g. DQN) until ``env.stop_value``, ``max_train_iter`` or ``max_env_step``.

    ``input_cfg`` is a config file path or a ``(main_config, create_config)`` pair. ``resume``: 'auto',
    'never' or a checkpoint path (None: the config's top-level ``resume``; see ``ding.entry.resume``).
    Returns the policy.
    """
    cfg, create_cfg = load_input_config(input_cfg)
    parts = build_serial_parts(cfg, create_cfg, seed, env_setting, model, dynamic_seed, max_env_step,
                               with_buffer=True, resume=resume)
    cfg, learner, collector, evaluator, buffer, commander = (
        parts.cfg, parts.learner, parts.collector, parts.evaluator, parts.buffer, parts.commander
    )
    learn_cfg = cfg.policy.learn
    use_priority = cfg.policy.get('priority', False)
    service = parts.service  # run control / metrics (ding.service); None unless cfg.service asks for it
    stop, reason = False, 'interrupted'
    try:
        learner.call_hook('before_run')
        while True:
            # Between iterations: pause waits here, tunes are applied, terminate writes the final checkpoint.
            if service is not None and not service.gate(learner.train_iter, collector.envstep):
                reason = 'terminated'
                break
            update_per_collect, batch_size = learn_cfg.update_per_collect, learn_cfg.batch_size  # tunable
            collect_kwargs = commander.step()
            if evaluator.should_eval(learner.train_iter):
                stop, eval_info = evaluator.eval(learner.save_checkpoint, learner.train_iter, collector.envstep)
                parts.progress.record_eval(eval_info['eval_episode_return_mean'])
                if stop:
                    reason = 'solved'
                    break
            new_data = collector.collect(train_iter=learner.train_iter, policy_kwargs=collect_kwargs)
            buffer.push(new_data, cur_collector_envstep=collector.envstep)
            for _ in range(update_per_collect):
                t0 = perf_counter()
                train_data = buffer.sample(batch_size, learner.train_iter)
                if service is not None:
                    service.observe_sample(train_data, perf_counter() - t0, learner.train_iter)
                if train_data is None:
                    break
                learner.train(train_data, collector.envstep)
                if use_priority:
                    buffer.update(learner.priority_info)
            parts.progress.update(collector.envstep, learner.train_iter)
            if collector.envstep >= max_env_step:
                reason = 'max_env_step reached'
                break
            if learner.train_iter >= max_train_iter:
                reason = 'max_train_iter reached'
                break
        learner.call_hook('after_run')
    except KeyboardInterrupt:
        learner.save_checkpoint(f'interrupt_iteration_{learner.train_iter}')
        raise
    finally:
        finish_run(parts, stop, reason)
    return parts.policy
