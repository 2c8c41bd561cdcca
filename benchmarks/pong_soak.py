"""Pong soak: frames/s sustained over minutes of async IMPALA training, and the process's RSS over that time.

``async_pipeline`` on ``dizoo/atari/config/pong_impala_config.py`` (EnvPool, 2 actors x 8 envs, evaluation off).
A side thread samples the learner's env-step count and this process's RSS (``/proc/self/status``) every
``--interval`` seconds and ends the run with SIGTERM after ``--minutes``. Frames = agent steps x frame skip 4.
A leak shows as RSS that keeps growing after the warm-up: the summary fits a line to the second half.

    python benchmarks/pong_soak.py [--minutes 2] [--interval 10] [--batch-size N]

``--batch-size`` overrides the config's unrolls per learner batch: the learner (the Nature CNN on one CPU thread)
sets the pace, so a smaller batch runs more iterations in the same minutes (a finer-grained leak check).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FRAME_SKIP = 4


def rss_mb() -> float:
    with open('/proc/self/status') as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith('VmRSS:'))
    return kb / 1024


def soak(minutes: float, interval: float, batch_size: int | None) -> list[tuple[float, int, int, float]]:
    """Samples ``(seconds since the first batch, env steps, train iterations, RSS MB)``."""
    from easydict import EasyDict

    from ding.entry.async_entry import build_async_parts, run_async_loop
    from dizoo.atari.config.pong_impala_config import create_config, main_config

    cfg, create_cfg = EasyDict(main_config), EasyDict(create_config)
    cfg.exp_name = 'bench_pong_soak'
    cfg.policy.eval.evaluator.eval_freq = 0
    if batch_size is not None:
        cfg.policy.learn.batch_size = batch_size
    parts = build_async_parts(cfg, create_cfg, 0, None, None, None)
    feed, learner = parts.feed, parts.learner
    samples: list[tuple[float, int, int, float]] = []

    def sample() -> None:
        while feed.envstep == 0:
            time.sleep(0.05)
        start = time.perf_counter()
        while True:
            now = time.perf_counter() - start
            samples.append((now, feed.envstep, learner.train_iter, rss_mb()))
            if now >= minutes * 60:
                break
            time.sleep(min(interval, minutes * 60 - now))
        signal.raise_signal(signal.SIGTERM)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run_async_loop(parts, None, None)
    except KeyboardInterrupt:
        pass
    sampler.join(timeout=5)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--minutes', type=float, default=2.0)
    parser.add_argument('--interval', type=float, default=10.0)
    parser.add_argument('--batch-size', type=int, default=None)
    args = parser.parse_args()
    os.environ.setdefault('DING_QUIET', '1')
    os.environ.setdefault('DING_PROGRESS', '0')
    import torch

    torch.set_num_threads(1)
    home, workdir = os.getcwd(), tempfile.mkdtemp(prefix='ding_pong_soak_')
    os.chdir(workdir)
    try:
        samples = soak(args.minutes, args.interval, args.batch_size)
    finally:
        os.chdir(home)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f'{"t (s)":>7} {"env steps":>10} {"iters":>6} {"frames/s (window)":>18} {"RSS MB":>8}')
    print('-' * 54)
    previous = None
    for t, steps, iters, rss in samples:
        window = '' if previous is None else f'{(steps - previous[1]) * FRAME_SKIP / (t - previous[0]):.0f}'
        print(f'{t:>7.0f} {steps:>10} {iters:>6} {window:>18} {rss:>8.0f}')
        previous = (t, steps)
    t0, s0, _, _ = samples[0]
    t1, s1, _, _ = samples[-1]
    half = samples[len(samples) // 2 :]
    slope = np.polyfit([s[0] / 60 for s in half], [s[3] for s in half], 1)[0] if len(half) > 1 else float('nan')
    print('-' * 54)
    print(
        f'sustained: {(s1 - s0) * FRAME_SKIP / (t1 - t0):.0f} frames/s ({(s1 - s0) / (t1 - t0):.0f} agent steps/s) '
        f'over {t1 - t0:.0f} s; RSS {samples[0][3]:.0f} -> {samples[-1][3]:.0f} MB, '
        f'second-half slope {slope:+.1f} MB/min'
    )


if __name__ == '__main__':
    main()
