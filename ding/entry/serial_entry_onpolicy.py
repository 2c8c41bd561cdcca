"""On-policy training on one machine (PPO, A2C): collect a rollout, train on it once, discard it."""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch

from .pipeline_parts import build_serial_parts, finish_run, load_input_config


def serial_pipeline_onpolicy(
        input_cfg: Union[str, Tuple[dict, dict]],
        seed: int = 0,
        env_setting: Optional[list] = None,
        model: Optional[torch.nn.Module] = None,
        max_train_iter: Optional[int] = int(1e10),
        max_env_step: Optional[int] = int(1e10),
        dynamic_seed: Optional[bool] = True,
        resume: Optional[str] = None,
) -> Any:
    """Train an on-policy algorithm until ``env.stop_value``, ``max_train_iter`` or ``max_env_step``.

    Each collected rollout is handed to ``learner.train`` once; the policy runs its own epochs and
    minibatches over it (``learn.epoch_per_collect``, ``learn.batch_size``). ``resume`` as in
    ``serial_pipeline``. Returns the policy.
    """
    cfg, create_cfg = load_input_config(input_cfg)
    parts = build_serial_parts(cfg, create_cfg, seed, env_setting, model, dynamic_seed, max_env_step,
                               with_buffer=False, resume=resume)
    learner, collector, evaluator, commander = parts.learner, parts.collector, parts.evaluator, parts.commander
    service = parts.service  # run control / metrics (ding.service); None unless cfg.service asks for it
    stop, reason = False, 'interrupted'
    try:
        learner.call_hook('before_run')
        while True:
            # Between iterations: pause waits here, tunes are applied, terminate writes the final checkpoint.
            if service is not None and not service.gate(learner.train_iter, collector.envstep):
                reason = 'terminated'
                break
            collect_kwargs = commander.step()
            if evaluator.should_eval(learner.train_iter):
                stop, eval_info = evaluator.eval(learner.save_checkpoint, learner.train_iter, collector.envstep)
                parts.progress.record_eval(eval_info['eval_episode_return_mean'])
                if stop:
                    reason = 'solved'
                    break
            new_data = collector.collect(train_iter=learner.train_iter, policy_kwargs=collect_kwargs)
            learner.train(new_data, collector.envstep)
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
