"""Time to solve CartPole with the serial pipeline, per algorithm and seed, process start included.

Each run is a fresh ``ding`` CLI process (so import and start-up time count); wall time is measured
around the process (CPU time, user + sys, is printed too: steadier on a busy machine), peak memory is the child's max RSS from ``wait4``, env steps and iterations
come from the run's summary line. Before the timed runs, ding's and dizoo's modules are byte-compiled once
(``compileall``) and the runs may use those caches, as on any normal installation (pip byte-compiles what it
installs; Python caches what it imports). Without this, a sandbox that sets ``PYTHONDONTWRITEBYTECODE=1``
makes every run re-compile ~150 modules from source (~0.3 s of start-up). Usage::

    python benchmarks/serial_cartpole.py                # DQN, PPO, A2C x seeds 0 1 2
    python benchmarks/serial_cartpole.py --algos dqn --seeds 0
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
CONFIGS = {
    'dqn': ('serial', 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py'),
    'ppo': ('serial_onpolicy', 'dizoo/classic_control/cartpole/config/cartpole_ppo_config.py'),
    'a2c': ('serial_onpolicy', 'dizoo/classic_control/cartpole/config/cartpole_a2c_config.py'),
}
TARGETS = {'dqn': 'wall <= 3.5 s, env steps <= 2000', 'ppo': 'wall <= 4 s', 'a2c': '-'}
SUMMARY = re.compile(
    r'\[ding\] (?P<exp>\S+): (?P<status>SOLVED|not solved[^|]*?) ?\|.*env steps (?P<steps>\d+) \| '
    r'train iters (?P<iters>\d+) \| wall (?P<wall>[\d.]+)s (?:\(set-up [\d.]+s\) )?\|.*best eval return (?P<best>\S+)'
)


def run_once(algo: str, seed: int, workdir: str, max_env_step: int) -> dict:
    mode, config = CONFIGS[algo]
    cmd = [
        sys.executable,
        '-m',
        'ding.entry.cli',
        '-m',
        mode,
        '-c',
        os.path.join(ROOT, config),
        '-s',
        str(seed),
        '--exp-name',
        f'bench_{algo}_seed{seed}',
        '--env-step',
        str(max_env_step),
    ]
    env = dict(os.environ, DING_PROGRESS='0', DING_QUIET='1', PYTHONPATH=ROOT)
    env.pop('PYTHONDONTWRITEBYTECODE', None)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = proc.stderr.read()
    _, status, rusage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    match = SUMMARY.search(stderr)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f'{algo} seed {seed} failed (exit {proc.returncode}):\n{stderr[-3000:]}')
    return dict(
        algo=algo,
        seed=seed,
        solved=match['status'] == 'SOLVED',
        wall=wall,
        steps=int(match['steps']),
        iters=int(match['iters']),
        best=match['best'],
        peak_mb=rusage.ru_maxrss / 1024,
        cpu=rusage.ru_utime + rusage.ru_stime,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--algos', nargs='+', default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--max-env-step', type=int, default=200_000, help='give up after this many env steps')
    args = parser.parse_args()
    subprocess.run(
        [sys.executable, '-m', 'compileall', '-q', os.path.join(ROOT, 'ding'), os.path.join(ROOT, 'dizoo')],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    workdir = tempfile.mkdtemp(prefix='ding_bench_')
    rows = []
    try:
        for algo in args.algos:
            for seed in args.seeds:
                row = run_once(algo, seed, workdir, args.max_env_step)
                rows.append(row)
                print(
                    f'  {algo} seed {seed}: {"solved" if row["solved"] else "NOT solved"} in {row["wall"]:.2f}s',
                    file=sys.stderr,
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    header = f'{"algo":<5} {"seed":>4} {"solved":>6} {"wall s":>7} {"env steps":>9} {"iters":>6} {"best ret":>8} {"peak MB":>8} {"cpu s":>6}'
    print(header)
    print('-' * len(header))
    for r in rows:
        print(
            f'{r["algo"]:<5} {r["seed"]:>4} {str(r["solved"]):>6} {r["wall"]:>7.2f} {r["steps"]:>9} {r["iters"]:>6} '
            f'{r["best"]:>8} {r["peak_mb"]:>8.0f} {r["cpu"]:>6.2f}'
        )
    print('-' * len(header))
    for algo in args.algos:
        sel = [r for r in rows if r['algo'] == algo]
        print(
            f'{algo:<5} median: wall {statistics.median(r["wall"] for r in sel):.2f}s, '
            f'cpu {statistics.median(r["cpu"] for r in sel):.2f}s, env steps {statistics.median(r["steps"] for r in sel):.0f}, '
            f'peak {max(r["peak_mb"] for r in sel):.0f} MB, solved {sum(r["solved"] for r in sel)}/{len(sel)}'
            f'   (target: {TARGETS[algo]}, peak <= 250 MB)'
        )


if __name__ == '__main__':
    main()
