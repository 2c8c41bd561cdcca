"""Collector throughput: ``SampleSerialCollector`` over 8 CartPole envs (``base`` manager) against a raw
gymnasium loop that does the same steps with the same batched forward passes of the same DQN model.

    python benchmarks/collect_throughput.py [--steps 20000] [--repeats 5]

Prints env steps/s of both and their ratio (target: collector >= 0.5 x raw).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ENV_NUM = 8


def make_policy(cfg_main, cfg_create):
    from ding.config import compile_config
    from ding.policy import create_policy

    create_cfg = type(cfg_create)(dict(cfg_create))
    create_cfg.policy.type = 'dqn_command'
    cfg = compile_config(cfg_main, seed=0, auto=True, create_cfg=create_cfg, save_cfg=False)
    cfg.env.collector_env_num = ENV_NUM
    return cfg, create_policy(cfg.policy, enable_field=['collect', 'command'])


def collector_rate(cfg, policy, steps: int) -> float:
    from ding.envs import create_env_manager, get_vec_env_setting
    from ding.worker import create_serial_collector

    env_fn, collector_cfgs, _ = get_vec_env_setting(cfg.env, eval_=False)
    manager = create_env_manager(cfg.env.manager, [partial(env_fn, cfg=c) for c in collector_cfgs[:ENV_NUM]])
    manager.seed(0)
    collector = create_serial_collector(
        cfg.policy.collect.collector, env=manager, policy=policy.collect_mode, exp_name=cfg.exp_name
    )
    try:
        collector.collect(n_sample=ENV_NUM * 4, policy_kwargs={'eps': 0.5})  # warm-up
        start_steps, start = collector.envstep, time.perf_counter()
        collector.collect(n_sample=steps, policy_kwargs={'eps': 0.5})
        return (collector.envstep - start_steps) / (time.perf_counter() - start)
    finally:
        collector.close()
        manager.close()


def raw_rate(model: torch.nn.Module, steps: int) -> float:
    """The same work by hand: 8 gymnasium envs, one batched no-grad forward per step, eps-greedy."""
    import gymnasium as gym

    envs = [gym.make('CartPole-v0') for _ in range(ENV_NUM)]
    obs = np.stack([e.reset(seed=i)[0] for i, e in enumerate(envs)]).astype(np.float32)
    rng = np.random.default_rng(0)
    transitions = []
    done_steps, start = 0, time.perf_counter()
    with torch.no_grad():
        while done_steps < steps:
            logit = model(torch.from_numpy(obs))['logit']
            actions = logit.argmax(-1).numpy()
            explore = rng.random(ENV_NUM) < 0.5
            actions = np.where(explore, rng.integers(0, 2, ENV_NUM), actions)
            for i, env in enumerate(envs):
                next_obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
                next_obs = next_obs.astype(np.float32)
                transitions.append(
                    {
                        'obs': torch.from_numpy(obs[i]),
                        'next_obs': torch.from_numpy(next_obs),
                        'action': torch.tensor(actions[i]),
                        'reward': torch.tensor(reward),
                        'done': terminated,
                    }
                )
                if terminated or truncated:
                    next_obs = env.reset()[0].astype(np.float32)
                obs[i] = next_obs
            done_steps += ENV_NUM
    elapsed = time.perf_counter() - start
    for e in envs:
        e.close()
    return done_steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--steps', type=int, default=20000)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault('DING_QUIET', '1')
    home, workdir = os.getcwd(), tempfile.mkdtemp(prefix='ding_collect_bench_')
    os.chdir(workdir)  # the collectors' logs go there, and go with it
    try:
        from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

        cfg, policy = make_policy(main_config, create_config)
        model = policy._model
        coll, raw = [], []
        for _ in range(args.repeats):  # interleaved so drift in machine load hits both alike
            raw.append(raw_rate(model, args.steps))
            coll.append(collector_rate(cfg, policy, args.steps))
    finally:
        os.chdir(home)
        shutil.rmtree(workdir, ignore_errors=True)
    r, c = statistics.median(raw), statistics.median(coll)
    print(f'{"loop":<28} {"env steps/s (median of " + str(args.repeats) + ")":>28}')
    print('-' * 58)
    print(f'{"raw gymnasium + forward":<28} {r:>28.0f}')
    print(f'{"SampleSerialCollector/base":<28} {c:>28.0f}')
    print('-' * 58)
    print(f'ratio collector/raw: {c / r:.2f}   (target >= 0.5)')


if __name__ == '__main__':
    main()
