"""Off-policy training on one machine: collect -> replay buffer -> learner, with periodic evaluation."""

from __future__ import annotations

from time import perf_counter
from typing import Any

import torch

from .pipeline_parts import build_serial_parts, load_input_config, run_serial_loop


def serial_pipeline(
    input_cfg: str | tuple[dict, dict],
    seed: int = 0,
    env_setting: list | None = None,
    model: torch.nn.Module | None = None,
    max_train_iter: int | None = int(1e10),
    max_env_step: int | None = int(1e10),
    dynamic_seed: bool | None = True,
    resume: str | None = None,
) -> Any:
    """Train an off-policy algorithm (e.g. DQN) until ``env.stop_value``, ``max_train_iter`` or ``max_env_step``.

    ``input_cfg`` is a config file path or a ``(main_config, create_config)`` pair. ``resume``: 'auto',
    'never' or a checkpoint path (None: the config's top-level ``resume``; see ``ding.worker.resume``).
    Returns the policy.
    """
    cfg, create_cfg = load_input_config(input_cfg)
    parts = build_serial_parts(
        cfg, create_cfg, seed, env_setting, model, dynamic_seed, max_env_step, with_buffer=True, resume=resume
    )
    learner, collector, buffer, service = parts.learner, parts.collector, parts.buffer, parts.service
    ranks = parts.ranks
    learn_cfg = parts.cfg.policy.learn
    use_priority = parts.cfg.policy.get('priority', False)

    def train_on(new_data: list) -> None:
        buffer.push(new_data, cur_collector_envstep=collector.envstep)
        for _ in range(learn_cfg.update_per_collect):  # read every collect: run control may tune it
            t0 = perf_counter()
            train_data = buffer.sample(learn_cfg.batch_size, learner.train_iter)
            if service is not None:
                service.observe_sample(train_data, perf_counter() - t0, learner.train_iter)
            # Every rank runs the same updates (their gradients are averaged): train only when all have a batch.
            if not ranks.all(train_data is not None):
                break
            learner.train(train_data, collector.envstep)
            if use_priority:
                buffer.update(learner.priority_info)

    run_serial_loop(parts, train_on, max_train_iter, max_env_step)
    return parts.policy
