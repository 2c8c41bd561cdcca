"""Time to solve CartPole (eval return mean >= 195) with the SEED pipeline: SEED DQN and SEED A2C / IMPALA (and
its LSTM variant), seeds 0-2, each run a fresh ``ding -m seed`` process in a temporary directory.

    python benchmarks/seed_solve.py [--seeds 0 1 2] [--runs dqn a2c] [--dqn-nstep 1 3] [--timeout 400]

``--dqn-nstep`` runs SEED DQN once per value of ``policy.nstep`` (a config built on the dizoo one through
``base``). The table gives the wall time of the summary line (from the pipeline's start) and of the whole
process, the env steps and train iterations used, and the 1-minute load average when the run started: on a
shared machine every wall time scales with it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config')
RUNS = {
    'dqn': 'cartpole_seed_dqn_config.py',
    'a2c': 'cartpole_seed_a2c_config.py',
    'lstm': 'cartpole_seed_lstm_config.py',
}
SUMMARY = re.compile(
    r'\[ding\] \S+: (?P<status>SOLVED|not solved[^|]*) \|.*env steps (?P<steps>\d+) \| train iters (?P<iters>\d+) \|'
    r'.*wall (?P<wall>[\d.]+)s'
)


def _config_file(workdir: str, run: str, nstep: int | None) -> str:
    """The dizoo config, or one built on it (``base``) with ``policy.nstep`` changed."""
    path = os.path.join(CONFIGS, RUNS[run])
    if nstep is None:
        return path
    derived = os.path.join(workdir, f'{run}_nstep{nstep}_config.py')
    with open(derived, 'w') as f:
        f.write(f'base = {path!r}\nmain_config = dict(policy=dict(nstep={nstep}))\n')
    return derived


def solve(run: str, seed: int, nstep: int | None, timeout: float) -> dict[str, float | int | bool]:
    """One run: solved, pipeline wall s, process wall s, env steps, train iterations, load average at start."""
    workdir = tempfile.mkdtemp(prefix=f'ding_seed_solve_{run}_')
    env = dict(os.environ, DING_PROGRESS='0', PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    load = os.getloadavg()[0]
    start = time.perf_counter()
    try:
        config = _config_file(workdir, run, nstep)
        command = [sys.executable, '-m', 'ding.entry.cli', '-m', 'seed', '-c', config, '-s', str(seed)]
        proc = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(solved=False, wall=timeout, process_wall=timeout, steps=0, iters=0, load=load)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    process_wall = time.perf_counter() - start
    matches = list(SUMMARY.finditer(proc.stderr))
    if not matches:
        raise RuntimeError(f'{run} seed {seed}: no summary line (exit {proc.returncode}):\n{proc.stderr[-2000:]}')
    last = matches[-1]
    return dict(
        solved=last['status'] == 'SOLVED',
        wall=float(last['wall']),
        process_wall=process_wall,
        steps=int(last['steps']),
        iters=int(last['iters']),
        load=load,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--runs', nargs='+', default=['dqn', 'a2c'], choices=list(RUNS))
    parser.add_argument('--dqn-nstep', type=int, nargs='+', default=None, help='policy.nstep values for SEED DQN')
    parser.add_argument('--timeout', type=float, default=400.0, help='seconds per run (counted as not solved)')
    args = parser.parse_args()
    variants: list[tuple[str, int | None]] = []
    for run in args.runs:
        nsteps: list[int | None] = list(args.dqn_nstep) if run == 'dqn' and args.dqn_nstep else [None]
        variants += [(run, nstep) for nstep in nsteps]
    rows = []
    for seed in args.seeds:  # interleaved, so that load changes hit every variant alike
        for run, nstep in variants:
            name = run if nstep is None else f'{run} n={nstep}'
            rows.append((name, seed, solve(run, seed, nstep, args.timeout)))
            print(f'done: {name} seed {seed}: {rows[-1][2]}', file=sys.stderr, flush=True)
    header = f'{"run":<10} {"seed":>4} {"solved":>7} {"pipeline wall s":>16} {"process wall s":>15}'
    print(f'{header} {"env steps":>10} {"train iters":>12} {"load":>5}')
    for name, seed, r in rows:
        print(
            f'{name:<10} {seed:>4} {str(r["solved"]):>7} {r["wall"]:>16.1f} {r["process_wall"]:>15.1f} '
            f'{r["steps"]:>10} {r["iters"]:>12} {r["load"]:>5.1f}'
        )
    for name in dict.fromkeys(name for name, _, _ in rows):
        mine = [r for n, _, r in rows if n == name]
        print(
            f'{name}: solved {sum(bool(r["solved"]) for r in mine)}/{len(mine)}, median pipeline wall '
            f'{statistics.median(float(r["wall"]) for r in mine):.1f} s, median env steps '
            f'{statistics.median(int(r["steps"]) for r in mine):.0f}'
        )


if __name__ == '__main__':
    main()
