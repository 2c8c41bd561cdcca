"""On-policy training on one machine (PPO, A2C): collect a rollout, train on it once, discard it."""

from __future__ import annotations

from typing import Any

import torch

from .pipeline_parts import build_serial_parts, load_input_config, run_serial_loop


def serial_pipeline_onpolicy(
    input_cfg: str | tuple[dict, dict],
    seed: int = 0,
    env_setting: list | None = None,
    model: torch.nn.Module | None = None,
    max_train_iter: int | None = int(1e10),
    max_env_step: int | None = int(1e10),
    dynamic_seed: bool | None = True,
    resume: str | None = None,
) -> Any:
    """Train an on-policy algorithm until ``env.stop_value``, ``max_train_iter`` or ``max_env_step``.

    Each collected rollout is handed to ``learner.train`` once; the policy runs its own epochs and
    minibatches over it (``learn.epoch_per_collect``, ``learn.batch_size``). ``resume`` as in
    ``serial_pipeline``. Returns the policy.
    """
    cfg, create_cfg = load_input_config(input_cfg)
    parts = build_serial_parts(
        cfg, create_cfg, seed, env_setting, model, dynamic_seed, max_env_step, with_buffer=False, resume=resume
    )
    learner, collector, ranks = parts.learner, parts.collector, parts.ranks

    def train_on(new_data: list) -> None:
        if ranks.several:  # the same number of minibatch updates on every rank: train on as many samples as all have
            new_data = new_data[: ranks.smallest(len(new_data))]
        learner.train(new_data, collector.envstep)

    run_serial_loop(parts, train_on, max_train_iter, max_env_step)
    return parts.policy
