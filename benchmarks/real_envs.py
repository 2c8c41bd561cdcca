"""Smoke figures on real tasks through the generic ``type='gymnasium'`` env: MuJoCo Hopper SAC and Atari Pong DQN
on the serial pipeline (dizoo/mujoco/config/hopper_sac_config.py, dizoo/atari/config/pong_dqn_config.py, with a
budget that fits a 2-core machine), not solves.

For each task it prints (1) the envs' own throughput, random actions through the base (1 env, in this process) and
subprocess (``--envs`` envs) managers, (2) the training run: env steps per second of the whole pipeline (collection,
training and the periodic evaluations), and (3) the mean return of the trained policy over ``--eval-episodes``
whole episodes (evaluation settings: true rewards, whole games) after the fixed budget. Usage::

    python benchmarks/real_envs.py --task hopper --env-steps 30000
    python benchmarks/real_envs.py --task pong --env-steps 60000
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from functools import partial

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ding.entry import serial_pipeline  # noqa: E402
from ding.envs import GymnasiumEnv, create_env_manager, get_vec_env_setting  # noqa: E402


def task_config(task: str, env_steps: int) -> tuple:
    """The dizoo config, resized for the budget (fewer evaluation episodes, a buffer that fits the run)."""
    if task == 'hopper':
        from dizoo.mujoco.config.hopper_sac_config import create_config, main_config

        main = copy.deepcopy(main_config)
        main.env.update(evaluator_env_num=1, n_evaluator_episode=1)
        main.policy.random_collect_size = min(10000, env_steps // 3)
        main.policy.eval.evaluator.eval_freq = 10**9  # only the evaluation at the start; the final one is below
    else:
        from dizoo.atari.config.pong_dqn_config import create_config, main_config

        main = copy.deepcopy(main_config)
        main.env.update(collector_env_num=4, evaluator_env_num=1, n_evaluator_episode=1)
        main.policy.eval.evaluator.eval_freq = 10**9
        main.policy.other.eps.decay = env_steps // 2
    main.policy.other.replay_buffer.replay_buffer_size = min(main.policy.other.replay_buffer.replay_buffer_size, 50000)
    main.exp_name = f'bench_{task}'
    return main, copy.deepcopy(create_config)


def env_throughput(env_cfg: dict, manager: str, env_num: int, steps: int) -> float:
    """Env steps per second with random actions through an env manager (``steps`` env steps in all)."""
    env_fn, collector_cfgs, _ = get_vec_env_setting(dict(env_cfg, collector_env_num=env_num))
    envs = create_env_manager(dict(type=manager), [partial(env_fn, cfg=c) for c in collector_cfgs])
    try:
        envs.seed(0)
        envs.launch()
        space = env_fn(cfg=collector_cfgs[0]).action_space
        done = 0
        start = time.perf_counter()
        while done < steps:
            ready = envs.ready_obs
            done += len(envs.step({i: space.sample() for i in ready}))
        return done / (time.perf_counter() - start)
    finally:
        envs.close()


def final_return(policy, env_cfg: dict, episodes: int, seed: int) -> tuple[float, float]:
    """Mean and std of whole-episode returns of the greedy policy (evaluation env settings)."""
    env = GymnasiumEnv(cfg=dict(env_cfg, is_train=False))
    env.seed(seed + 1000, dynamic_seed=True)
    eval_policy = policy.eval_mode
    returns = []
    try:
        for _ in range(episodes):
            obs, done = env.reset(), False
            eval_policy.reset()
            while not done:
                with torch.no_grad():
                    action = eval_policy.forward({0: obs})[0]['action']
                timestep = env.step(action)
                obs, done = timestep.obs, timestep.done
            returns.append(timestep.info['eval_episode_return'])
    finally:
        env.close()
    return float(np.mean(returns)), float(np.std(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--task', choices=['hopper', 'pong'], required=True)
    parser.add_argument('--env-steps', type=int, default=30000, help='the training budget in env steps')
    parser.add_argument('--eval-episodes', type=int, default=3)
    parser.add_argument('--envs', type=int, default=4, help='envs of the subprocess manager in the throughput part')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    main_cfg, create_cfg = task_config(args.task, args.env_steps)
    env_cfg = dict(main_cfg.env, type='gymnasium')
    rows = []
    for manager, env_num in (('base', 1), ('subprocess', args.envs)):
        rate = env_throughput(env_cfg, manager, env_num, 4000 if args.task == 'hopper' else 2000)
        rows.append((f'env only, {manager} manager, {env_num} env(s), random actions', f'{rate:.0f} env steps/s'))
    os.chdir(tempfile.mkdtemp(prefix=f'bench_{args.task}_'))
    os.environ.setdefault('DING_PROGRESS', '0')
    start = time.perf_counter()
    policy = serial_pipeline((main_cfg, create_cfg), seed=args.seed, max_env_step=args.env_steps)
    wall = time.perf_counter() - start
    rows.append(
        (f'training run ({args.env_steps} env steps, serial pipeline)', f'{args.env_steps / wall:.0f} env steps/s')
    )
    rows.append(('training run wall', f'{wall:.0f} s'))
    mean, std = final_return(policy, env_cfg, args.eval_episodes, args.seed)
    rows.append((f'return after the budget ({args.eval_episodes} whole episodes)', f'{mean:.1f} +- {std:.1f}'))
    print(f'\n{args.task}: {main_cfg.env.env_id}, {create_cfg.policy.type}, seed {args.seed}')
    for name, value in rows:
        print(f'| {name} | {value} |')


if __name__ == '__main__':
    main()
