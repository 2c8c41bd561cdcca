"""Pendulum SAC: ding's shipped config against DI-engine's own (its dizoo ``pendulum_sac_config``), seed by seed,
on the same env-step budget.

DI-engine's package is also called ``ding``, so it runs from its own virtual environment (``--di-python``), in a
process of its own; nothing of DI-engine is imported here. Set it up once (the venv reuses this interpreter's
torch)::

    python -m venv --system-site-packages /tmp/dienv
    /tmp/dienv/bin/pip install DI-engine==0.5.3

then::

    python benchmarks/sac_vs_diengine.py --di-python /tmp/dienv/bin/python --seeds 0 1 2 --env-step 20000

Figures: the best mean eval return within the budget, the env steps at which the stop value (-250) was first
reached (DI-engine: the evaluation's ``envstep_count``), and each run's wall time around the process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = 'dizoo/classic_control/pendulum/config/pendulum_sac_config.py'
STOP_VALUE = -250.0

DI_ENGINE_RUN = """
import sys
from ding.entry import serial_pipeline
from dizoo.classic_control.pendulum.config.pendulum_sac_config import main_config, create_config
seed, budget = int(sys.argv[1]), int(sys.argv[2])
main_config.exp_name = f'di_pendulum_sac_seed{seed}'
main_config.env.stop_value = float(sys.argv[3])
serial_pipeline((main_config, create_config), seed=seed, max_env_step=budget)
"""
# DI-engine's evaluator log: per evaluation a table whose first column is the train iteration (its envstep_count
# column counts the evaluator's own steps), and one whose last column is the mean return.
DI_ITER_ROW = re.compile(r'\| Value \| (?P<iter>[\d.]+)\s+\| iteration_\d+\.pth\.tar')
DI_RETURN_ROW = re.compile(r'\| Value \| \[[^]]*\]\s+\| (?P<mean>-?[\d.]+)\s+\|')
# the collector's env steps at iteration i in DI-engine's config: random_collect_size + i * n_sample / update_per_collect
DI_RANDOM_COLLECT, DI_STEPS_PER_ITER = 1000, 10


def diengine_evaluations(log_path: str) -> list[tuple[int, float]]:
    """(collector env steps, mean eval return) per evaluation, from DI-engine's evaluator text log."""
    with open(log_path, errors='replace') as f:
        text = f.read()
    iters = [int(float(m['iter'])) for m in DI_ITER_ROW.finditer(text)]
    returns = [float(m['mean']) for m in DI_RETURN_ROW.finditer(text)]
    return [(DI_RANDOM_COLLECT + i * DI_STEPS_PER_ITER, r) for i, r in zip(iters, returns)]


def ding_evaluations(exp_dir: str) -> list[tuple[int, float]]:
    """(env steps, mean eval return) per evaluation, from ding's ``log/eval.jsonl``."""
    with open(os.path.join(exp_dir, 'log', 'eval.jsonl')) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [(int(r['env_step']), float(r['eval_return'])) for r in records]


def summarise(framework: str, seed: int, evaluations: list[tuple[int, float]], wall: float, code: int) -> dict:
    reached = next((step for step, ret in evaluations if ret >= STOP_VALUE), None)
    best = max((ret for _, ret in evaluations), default=float('nan'))
    return dict(
        framework=framework, seed=seed, best=best, reached=reached, evals=len(evaluations), wall=wall, code=code
    )


def run_ding(seed: int, budget: int, workdir: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, DING_PROGRESS='0', OMP_NUM_THREADS='1')
    command = [sys.executable, '-m', 'ding.entry.cli', '-q', '-m', 'serial', '-c', os.path.join(ROOT, CONFIG)]
    started = time.perf_counter()
    code = subprocess.call([*command, '-s', str(seed), '--env-step', str(budget)], cwd=workdir, env=env)
    wall = time.perf_counter() - started
    return summarise('ding', seed, ding_evaluations(os.path.join(workdir, f'pendulum_sac_seed{seed}')), wall, code)


def run_diengine(python: str, seed: int, budget: int, workdir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env['OMP_NUM_THREADS'] = '1'
    started = time.perf_counter()
    with open(os.path.join(workdir, f'di_seed{seed}.out'), 'wb') as out:
        code = subprocess.call(
            [python, '-c', DI_ENGINE_RUN, str(seed), str(budget), str(STOP_VALUE)],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wall = time.perf_counter() - started
    log = os.path.join(workdir, f'di_pendulum_sac_seed{seed}', 'log', 'evaluator', 'evaluator_logger.txt')
    return summarise('DI-engine 0.5.3', seed, diengine_evaluations(log), wall, code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--di-python', help="a Python whose 'ding' is DI-engine (skipped when not given)")
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--env-step', type=int, default=20000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for seed in args.seeds:
            rows.append(run_ding(seed, args.env_step, workdir))
            if args.di_python:
                rows.append(run_diengine(args.di_python, seed, args.env_step, workdir))
    print(f'\nPendulum SAC, budget {args.env_step} env steps, stop value {STOP_VALUE}')
    print('| framework | seed | best eval return | env steps to -250 | evaluations | wall s | exit |')
    print('|---|---:|---:|---:|---:|---:|---:|')
    for r in rows:
        reached = '-' if r['reached'] is None else r['reached']
        print(
            f'| {r["framework"]} | {r["seed"]} | {r["best"]:.1f} | {reached} | {r["evals"]} | {r["wall"]:.1f} | '
            f'{r["code"]} |'
        )


if __name__ == '__main__':
    main()
