"""Evaluating a trained policy from a checkpoint."""

from __future__ import annotations

import sys
from functools import partial

import torch

from ding.config import ConfigError, compile_config
from ding.envs import create_env_manager, get_vec_env_setting
from ding.policy import create_policy
from ding.utils import set_pkg_seed
from ding.utils.checkpoint import load_checkpoint
from ding.worker import InteractionSerialEvaluator

from .pipeline_parts import load_input_config


def eval(
    input_cfg: str | tuple[dict, dict],
    seed: int = 0,
    env_setting: list | None = None,
    model: torch.nn.Module | None = None,
    state_dict: dict | None = None,
    load_path: str | None = None,
) -> float:
    """Run ``n_evaluator_episode`` greedy episodes of the policy stored at ``load_path``.

    Returns the mean episode return and prints one line per episode plus the mean. Raises ``ConfigError`` without
    ``load_path`` and ``CheckpointError`` (naming the file) when the checkpoint cannot be used.
    """
    cfg, create_cfg = load_input_config(input_cfg)
    create_cfg.policy.type += '_command'
    env_fn = None if env_setting is None else env_setting[0]
    cfg = compile_config(cfg, seed=seed, env=env_fn, auto=True, create_cfg=create_cfg, save_cfg=True)
    if env_setting is None:
        env_fn, _, evaluator_env_cfg = get_vec_env_setting(cfg.env, collect=False)
    else:
        env_fn, _, evaluator_env_cfg = env_setting
    evaluator_env = create_env_manager(cfg.env.manager, [partial(env_fn, cfg=c) for c in evaluator_env_cfg])
    evaluator_env.seed(seed, dynamic_seed=False)
    set_pkg_seed(seed, use_cuda=cfg.policy.cuda)
    policy = create_policy(cfg.policy, model=model, enable_field=['eval'])
    if state_dict is None:
        if load_path is None:
            raise ConfigError('eval needs a checkpoint: pass load_path (ding -m eval --load-path FILE)')
        state_dict = load_checkpoint(load_path)
    policy.eval_mode.load_state_dict(state_dict)
    evaluator = InteractionSerialEvaluator(
        cfg.policy.eval.evaluator, evaluator_env, policy.eval_mode, exp_name=cfg.exp_name
    )
    try:
        _, episode_info = evaluator.eval()
    finally:
        evaluator.close()
        evaluator_env.close()
    returns: list[float] = list(episode_info['eval_episode_return'])
    for i, r in enumerate(returns):
        print(f'episode {i}: return {r:.2f}', file=sys.stderr)
    mean = float(sum(returns) / max(len(returns), 1))
    print(
        f'[ding] eval {cfg.exp_name}: {len(returns)} episodes, mean return {mean:.2f} (checkpoint {load_path})',
        file=sys.stderr,
    )
    return mean
