"""SEED (central inference) on this machine: the transport's round trip and CartPole throughput.

Rows:

- shm transport round trip: one actor process sends ``--requests`` requests of 8 CartPole-sized observations to
  an inference server with a 4 -> 2 linear model (no env, no learner); per-request time seen by the actor, p50 / p99;
- SEED IMPALA / SEED DQN: ``seed_pipeline`` on ``cartpole_seed_a2c_config`` / ``cartpole_seed_dqn_config``, 2 actor
  processes x 8 envs, training, evaluation off: env steps/s over ``--seconds`` after a warm-up, mean inference
  batch, request latency p50 / p99 (server side);
- async IMPALA (actor-side inference, 2 actor threads x 8 envs, double buffering off), the same way, for comparison.

    python benchmarks/seed_inference.py [--seconds 20] [--requests 20000] [--skip-async]
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ENVS = 8


def client_main(socket_path: str, requests: int) -> None:
    """The actor side of the round-trip row (run in a child process): prints p50 and p99 in microseconds."""
    from ding.worker.seed.transport import RUN_SECRET_ENV, ActorClient, SlotLayout

    client = ActorClient(socket_path, os.environ[RUN_SECRET_ENV], 0, SlotLayout(ENVS, (4,), 2))
    client.join()
    obs = np.zeros((ENVS, 4), dtype=np.float32)
    reward, flags = np.zeros(ENVS, dtype=np.float32), np.zeros(ENVS, dtype=bool)
    times = np.empty(requests)
    for i in range(requests):
        start = time.perf_counter()
        client.request(obs, reward, flags, flags)
        times[i] = time.perf_counter() - start
    client.close()
    warm = times[requests // 10 :] * 1e6
    print(f'{np.percentile(warm, 50):.1f} {np.percentile(warm, 99):.1f}')


def round_trip(requests: int) -> tuple[float, float]:
    import torch

    from ding.worker.async_actor.queues import StagingQueue, TrajectoryQueue
    from ding.worker.seed.acting import BatchActing, QNetActing
    from ding.worker.seed.assembly import TransitionAssembler
    from ding.worker.seed.server import InferenceServer
    from ding.worker.seed.transport import RUN_SECRET_ENV, SlotLayout, new_secret

    class Linear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(4, 2)

        def forward(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
            return {'logit': self.head(obs)}

    qnet = QNetActing(Linear())
    staging = StagingQueue(1)
    staging.publish(0, qnet.actor_weights())
    layout = SlotLayout(ENVS, (4,), 2)
    sink_queue: TrajectoryQueue[Any] = TrajectoryQueue(1_000_000)
    workdir, secret = tempfile.mkdtemp(prefix='ding_seed_bench_'), new_secret()
    server = InferenceServer(
        os.path.join(workdir, 's.sock'),
        secret,
        layout,
        1,
        BatchActing(qnet, staging),
        TransitionAssembler(1_000_000, layout, sink_queue),  # chunks never fill: no assembly cost beyond the step
        ENVS,
        0,
        60.0,
    )
    server.start()
    try:
        out = subprocess.run(
            [sys.executable, __file__, '--client', server.socket_path, '--requests', str(requests)],
            env={**os.environ, RUN_SECRET_ENV: secret, 'PYTHONPATH': ROOT},
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        server.stop()
        sink_queue.close()
        shutil.rmtree(workdir, ignore_errors=True)
    p50, p99 = (float(x) for x in out.stdout.split())
    return p50, p99


def _sampled_run(parts: Any, run_loop: Any, seconds: float) -> float:
    """Env steps/s of a pipeline run after a warm-up, sampled from a side thread that ends it with SIGTERM."""
    feed, result = parts.feed, {}

    def sample() -> None:
        while feed.envstep == 0:
            time.sleep(0.05)
        time.sleep(min(3.0, seconds / 4))
        start_steps, start = feed.envstep, time.perf_counter()
        time.sleep(seconds)
        result['rate'] = (feed.envstep - start_steps) / (time.perf_counter() - start)
        signal.raise_signal(signal.SIGTERM)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run_loop(parts, None, None)
    except KeyboardInterrupt:
        pass
    sampler.join(timeout=5)
    return result['rate']


def seed_rate(config: str, seconds: float) -> tuple[float, dict[str, float]]:
    from easydict import EasyDict

    from ding.entry.seed_entry import build_seed_parts, run_seed_loop

    module = importlib.import_module(f'dizoo.classic_control.cartpole.config.{config}')
    cfg, create_cfg = EasyDict(module.main_config), EasyDict(module.create_config)
    cfg.exp_name = f'bench_{config}'
    cfg.policy.eval.evaluator.eval_freq = 0
    cfg.policy.seed.update(actor_num=2, env_per_actor=ENVS)
    parts = build_seed_parts(cfg, create_cfg, 0, None, None, None)
    rate = _sampled_run(parts, run_seed_loop, seconds)
    return rate, parts.server.stats.snapshot()


def async_rate(seconds: float) -> float:
    from easydict import EasyDict

    from ding.entry.async_entry import build_async_parts, run_async_loop

    module = importlib.import_module('dizoo.classic_control.cartpole.config.cartpole_impala_config')
    cfg, create_cfg = EasyDict(module.main_config), EasyDict(module.create_config)
    cfg.exp_name = 'bench_async_impala'
    cfg.policy.eval.evaluator.eval_freq = 0
    cfg.policy.async_actor.update(actor_num=2, env_per_actor=ENVS, double_buffer=False)
    cfg.policy.learn.batch_size = 2
    parts = build_async_parts(cfg, create_cfg, 0, None, None, None)
    return _sampled_run(parts, run_async_loop, seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--seconds', type=float, default=20.0)
    parser.add_argument('--requests', type=int, default=20_000)
    parser.add_argument('--skip-async', action='store_true')
    parser.add_argument('--client', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args.client, args.requests)
        return
    os.environ.setdefault('DING_QUIET', '1')
    os.environ.setdefault('DING_PROGRESS', '0')
    import torch

    torch.set_num_threads(1)
    p50, p99 = round_trip(args.requests)
    home, workdir = os.getcwd(), tempfile.mkdtemp(prefix='ding_seed_bench_')
    os.chdir(workdir)
    rows: list[tuple[str, float, str, str]] = []
    try:
        for config, what in (('cartpole_seed_a2c_config', 'SEED IMPALA'), ('cartpole_seed_dqn_config', 'SEED DQN')):
            rate, stats = seed_rate(config, args.seconds)
            latency = f'{stats["latency_us_p50"]:.0f} / {stats["latency_us_p99"]:.0f}'
            rows.append((f'{what}, 2 processes x {ENVS} envs', rate, f'{stats["inference_batch_mean"]:.1f}', latency))
        if not args.skip_async:
            rows.append((f'async IMPALA, 2 threads x {ENVS} envs (actor-side)', async_rate(args.seconds), '-', '-'))
    finally:
        os.chdir(home)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f'shm transport round trip, 1 actor x {ENVS} obs: p50 {p50:.1f} us, p99 {p99:.1f} us')
    print(f'{"CartPole":<48} {"env steps/s":>12} {"batch":>6} {"latency p50 / p99 us":>22}')
    print('-' * 91)
    for what, rate, batch, latency in rows:
        print(f'{what:<48} {rate:>12.0f} {batch:>6} {latency:>22}')


if __name__ == '__main__':
    main()
