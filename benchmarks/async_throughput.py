"""Async pipeline throughput: env steps/s of CartPole (2 actor threads x 16 envs) and Pong (2 x 8) on this machine.

Rows, each measured for ``--seconds`` after a warm-up:

- raw: the actors' vector envs (EnvPool) stepped with random actions by 2 threads, no model, no learner: the limit;
  once where the OS places the threads, once with every thread on one core (as ``cpu_affinity`` places a run);
- serial PPO collector (CartPole): today's ``cartpole_ppo_config`` ``SampleSerialCollector`` (8 envs) collecting only,
  and the serial on-policy loop (collect 256 steps, train on them; no evaluation);
- async IMPALA: ``async_pipeline`` on ``cartpole_impala_config`` / ``pong_impala_config`` with the actors' torch or
  numpy inference (``numpy_inference``), double buffering on / off, staging queue 1 / 2 and (CartPole) unrolls of
  20 and 40 steps beside the config's, the same 32 envs in one actor thread, and (CartPole) the learner, actor and
  EnvPool threads on one core (``policy.async_actor.cpu_affinity``); one unroll of each actor per learner batch,
  evaluation off; env steps/s over the run's training part and the mean policy lag.

    python benchmarks/async_throughput.py [--seconds 20] [--envs cartpole pong] [--skip-async]

Targets (issue 12): CartPole async >= 3x the serial on-policy collection, >= 0.5x raw; mean lag <= 2 with staging 1.
Each async row is compared with the raw row of the same placement.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ACTORS = 2
ONE_CORE = [max(os.sched_getaffinity(0))] if hasattr(os, 'sched_getaffinity') else None
ENVS = {'cartpole': ('CartPole-v1', 16), 'pong': ('ALE/Pong-v5', 8)}


def env_section(name: str) -> dict[str, Any]:
    """The env section of the env's IMPALA config (backend and EnvPool settings: the raw row steps the same envs)."""
    import importlib

    return dict(importlib.import_module(CONFIGS[name]).main_config.env)


def raw_rate(name: str, envs_per_actor: int, seconds: float, one_core: bool = False) -> float:
    """Env steps/s of ``ACTORS`` threads, each stepping its own ``envs_per_actor`` EnvPool envs with random actions
    (``one_core``: the threads and EnvPool's on the core ``ONE_CORE``)."""
    from ding.utils.cpu_affinity import pin_calling_thread

    restore = pin_calling_thread(ONE_CORE) if one_core and ONE_CORE else None  # the threads made below inherit it
    try:
        return _raw_rate(env_section(name), envs_per_actor, seconds)
    finally:
        if restore is not None:
            restore()


def _raw_rate(env_cfg: dict[str, Any], envs_per_actor: int, seconds: float) -> float:
    from ding.envs.vector import make_vector_env

    vector_envs = [make_vector_env(env_cfg, envs_per_actor, seed=i * 100) for i in range(ACTORS)]
    counts = [0] * ACTORS
    stop = threading.Event()

    def run(i: int) -> None:
        env, rng = vector_envs[i], np.random.default_rng(i)
        env.reset(seed=i * 100)
        while not stop.is_set():
            env.step(rng.integers(0, env.action_num, env.num_envs))
            counts[i] += env.num_envs

    threads = [threading.Thread(target=run, args=(i,)) for i in range(ACTORS)]
    try:
        for t in threads:
            t.start()
        time.sleep(min(2.0, seconds / 4))  # warm-up
        start_count, start = sum(counts), time.perf_counter()
        time.sleep(seconds)
        return (sum(counts) - start_count) / (time.perf_counter() - start)
    finally:
        stop.set()
        for t in threads:
            t.join()
        for env in vector_envs:
            env.close()


def serial_ppo_rates(seconds: float) -> tuple[float, float]:
    """(collector only, collect + train) env steps/s of today's serial on-policy PPO config on CartPole."""
    from ding.entry.pipeline_parts import build_serial_parts
    from dizoo.classic_control.cartpole.config.cartpole_ppo_config import create_config, main_config

    parts = build_serial_parts(main_config, create_config, 0, None, None, True, None, with_buffer=False, resume=None)
    learner, collector = parts.learner, parts.collector
    try:
        collector.collect(train_iter=0)  # warm-up

        def timed(step: Callable[[], Any]) -> float:
            start_steps, start = collector.envstep, time.perf_counter()
            while time.perf_counter() - start < seconds:
                step()
            return (collector.envstep - start_steps) / (time.perf_counter() - start)

        collect_only = timed(lambda: collector.collect(train_iter=learner.train_iter))
        with_training = timed(
            lambda: learner.train(collector.collect(train_iter=learner.train_iter), collector.envstep)
        )
        return collect_only, with_training
    finally:
        for close in (collector.close, parts.evaluator.close, learner.close):
            close()


CONFIGS = {
    'cartpole': 'dizoo.classic_control.cartpole.config.cartpole_impala_config',
    'pong': 'dizoo.atari.config.pong_impala_config',
}


class Variant(NamedTuple):
    numpy_inference: bool
    double_buffer: bool
    staging: int
    unroll_len: int | None = None  # None: the config's
    actors: int = ACTORS  # the same envs in all: 1 actor steps ACTORS x the envs (per batched step costs)
    one_core: bool = False  # cpu_affinity: the learner, actor and EnvPool threads on the core ONE_CORE

    def describe(self, config_unroll: int) -> str:
        text = (
            f'numpy_inference {"on " if self.numpy_inference else "off"}, double buffer {"on " if self.double_buffer else "off"}, '
            f'staging {self.staging}, unroll {self.unroll_len or config_unroll}'
        )
        if self.actors != ACTORS:
            text += f', {self.actors} actor(s)'
        return text + (', one core' if self.one_core else '')


VARIANTS = [
    Variant(False, False, 1),  # the actors' torch inference (before numpy chains)
    Variant(True, True, 1),
    Variant(True, False, 1),
    Variant(True, True, 2),
    Variant(True, False, 2),
    Variant(True, False, 1, 20),
    Variant(True, False, 1, 40),
    Variant(True, False, 1, None, 1),  # the same 32 envs in one actor thread: half the batched steps
    Variant(True, False, 1, 40, 1),
    Variant(True, False, 1, None, ACTORS, True),  # every thread on one core: hand-offs without cross-core wake-ups
    Variant(True, False, 1, 20, ACTORS, True),
    Variant(True, False, 1, 40, ACTORS, True),
    Variant(True, False, 1, None, 1, True),
]


def async_rate(name: str, variant: Variant, seconds: float) -> tuple[float, float]:
    """(env steps/s, mean policy lag) of ``async_pipeline`` on the env's IMPALA config with ``ACTORS`` actors of
    the ``ENVS`` count, evaluation off.

    The learner's env-step count and the newest batch's lag are sampled every 0.1 s from a side thread; after
    the warm-up and ``seconds`` it ends the run with SIGTERM (the pipeline's own way to stop: actors stopped,
    checkpoint written, every env closed)."""
    import signal

    from easydict import EasyDict

    from ding.entry.async_entry import build_async_parts, run_async_loop

    module = importlib.import_module(CONFIGS[name])
    # deep copies: EasyDict() shares the nested sections, and one variant's changes would reach the next ones
    cfg, create_cfg = EasyDict(copy.deepcopy(module.main_config)), EasyDict(copy.deepcopy(module.create_config))
    cfg.exp_name = f'bench_{name}'
    cfg.policy.eval.evaluator.eval_freq = 0
    cfg.policy.async_actor.update(
        actor_num=variant.actors,
        env_per_actor=ENVS[name][1] * ACTORS // variant.actors,
        double_buffer=variant.double_buffer,
        staging_queue_size=variant.staging,
        numpy_inference=variant.numpy_inference,
        cpu_affinity=ONE_CORE if variant.one_core else None,
    )
    if variant.unroll_len is not None:
        cfg.policy.async_actor.unroll_len = variant.unroll_len
    # One unroll of each actor per update: a policy version per round of the actors (with one unroll per
    # update the learner, the slower side here, counts a version per unroll and the lag doubles).
    cfg.policy.learn.batch_size = variant.actors
    parts = build_async_parts(cfg, create_cfg, 0, None, None, None)
    feed, result = parts.feed, {}

    def sample() -> None:
        while feed.envstep == 0:  # until the first batch
            time.sleep(0.05)
        time.sleep(min(3.0, seconds / 4))  # warm-up
        lags, start_steps, start = [], feed.envstep, time.perf_counter()
        while time.perf_counter() - start < seconds:
            time.sleep(0.1)
            if feed.last_lag is not None:
                lags.append(feed.last_lag.mean)
        result['rate'] = (feed.envstep - start_steps) / (time.perf_counter() - start)
        result['lag'] = float(np.mean(lags)) if lags else float('nan')
        signal.raise_signal(signal.SIGTERM)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run_async_loop(parts, None, None)
    except KeyboardInterrupt:
        pass
    sampler.join(timeout=5)
    return result['rate'], result['lag']


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--seconds', type=float, default=20.0)
    parser.add_argument('--envs', nargs='+', default=list(ENVS), choices=list(ENVS))
    parser.add_argument('--skip-async', action='store_true')
    args = parser.parse_args()
    os.environ.setdefault('DING_QUIET', '1')
    os.environ.setdefault('DING_PROGRESS', '0')
    import torch

    torch.set_num_threads(1)
    home, workdir = os.getcwd(), tempfile.mkdtemp(prefix='ding_async_bench_')
    os.chdir(workdir)  # the runs' experiment directories go there, and go with it
    rows: list[tuple[str, str, float, str]] = []
    ratios: list[str] = []  # CartPole async against the serial collector and raw EnvPool
    try:
        for name in args.envs:
            env_id, per_actor = ENVS[name]
            raw = raw_rate(name, per_actor, args.seconds)
            rows.append((name, f'raw EnvPool, {ACTORS} threads x {per_actor} envs, random actions', raw, '-'))
            raw_one_core = None
            if name == 'cartpole' and ONE_CORE is not None:
                raw_one_core = raw_rate(name, per_actor, args.seconds, one_core=True)
                rows.append((name, f'raw EnvPool, {ACTORS} threads x {per_actor} envs, one core', raw_one_core, '-'))
            if name == 'cartpole':
                collect, loop = serial_ppo_rates(args.seconds)
                rows.append((name, 'serial PPO collector (8 envs), collecting only', collect, '-'))
                rows.append((name, 'serial PPO loop: collect 256 + train (no eval)', loop, '-'))
            if args.skip_async:
                continue
            config_unroll = int(importlib.import_module(CONFIGS[name]).main_config.policy.async_actor.unroll_len)
            for variant in VARIANTS:
                sweep = variant.unroll_len is not None or variant.actors != ACTORS or variant.one_core
                if sweep and name != 'cartpole':
                    continue  # the unroll, actor and placement sweeps are CartPole's
                if variant.one_core and ONE_CORE is None:
                    continue  # thread affinity is Linux-only
                rate, lag = async_rate(name, variant, args.seconds)
                rows.append((name, f'async IMPALA, {variant.describe(config_unroll)}', rate, f'{lag:.2f}'))
                if name == 'cartpole':
                    limit = raw_one_core if variant.one_core and raw_one_core else raw
                    ratios.append(
                        f'{variant.describe(config_unroll)}: {rate / collect:.2f}x serial, {rate / limit:.2f}x raw'
                        f'{" (one core)" if variant.one_core else ""}'
                    )
    finally:
        os.chdir(home)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f'{"env":<9} {"what":<74} {"env steps/s":>12} {"mean lag":>9}')
    print('-' * 107)
    for env, what, rate, lag in rows:
        print(f'{env:<9} {what:<74} {rate:>12.0f} {lag:>9}')
    for line in ratios:
        print(line)


if __name__ == '__main__':
    main()
