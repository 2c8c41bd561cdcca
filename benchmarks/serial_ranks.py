"""CartPole DQN solve time on 1 and on 2 rank processes (``ding -m serial ... --nproc N``), start-up included.

Each run is a fresh ``ding`` command: wall time around it (the launcher and its ranks), the run loop's own wall
time, iterations and env steps (summed over the ranks) from the summary line, and the CPU time of the command and
its ranks (user + sys; steadier than wall time on a busy machine). Usage::

    python benchmarks/serial_ranks.py                    # nproc 1 and 2 x seeds 0 1 2
    python benchmarks/serial_ranks.py --nprocs 2 --seeds 0
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
CONFIG = os.path.join(ROOT, 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py')
SUMMARY = re.compile(
    r'\[ding\] \S+: (?P<status>SOLVED|not solved[^|]*?) ?\|.*env steps (?P<steps>\d+) \| '
    r'train iters (?P<iters>\d+) \| wall (?P<loop>[\d.]+)s'
)


def run_once(nproc: int, seed: int, workdir: str, max_env_step: int) -> dict:
    cmd = [sys.executable, '-m', 'ding.entry.cli', '-m', 'serial', '-c', CONFIG, '-s', str(seed)]
    cmd += ['--exp-name', f'bench_n{nproc}_seed{seed}', '--env-step', str(max_env_step), '--nproc', str(nproc)]
    env = dict(os.environ, DING_PROGRESS='0', DING_QUIET='1', PYTHONPATH=ROOT)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    _, status, rusage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    match = SUMMARY.search(stderr)
    if code != 0 or match is None:
        raise RuntimeError(f'nproc {nproc} seed {seed} failed (exit {code}):\n{stderr[-3000:]}')
    return dict(
        nproc=nproc,
        seed=seed,
        solved=match['status'] == 'SOLVED',
        wall=wall,
        loop=float(match['loop']),
        steps=int(match['steps']),
        iters=int(match['iters']),
        cpu=rusage.ru_utime + rusage.ru_stime,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--nprocs', nargs='+', type=int, default=[1, 2])
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--max-env-step', type=int, default=200_000, help='give up after this many env steps')
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='ding_ranks_bench_')
    rows = []
    try:
        for seed in args.seeds:
            for nproc in args.nprocs:  # interleaved: a change in the machine's load hits both alike
                rows.append(run_once(nproc, seed, workdir, args.max_env_step))
                print(f'  nproc {nproc} seed {seed}: {rows[-1]["wall"]:.1f}s', file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    header = (
        f'{"nproc":>5} {"seed":>4} {"solved":>6} {"wall s":>7} {"loop s":>7} {"iters":>6} {"env steps":>9} {"cpu s":>6}'
    )
    print(header)
    print('-' * len(header))
    for r in rows:
        print(
            f'{r["nproc"]:>5} {r["seed"]:>4} {str(r["solved"]):>6} {r["wall"]:>7.2f} {r["loop"]:>7.2f} '
            f'{r["iters"]:>6} {r["steps"]:>9} {r["cpu"]:>6.2f}'
        )
    print('-' * len(header))
    for nproc in args.nprocs:
        sel = [r for r in rows if r['nproc'] == nproc]
        medians = {k: statistics.median(r[k] for r in sel) for k in ('wall', 'loop', 'iters', 'steps')}
        print(
            f'nproc {nproc} median: wall {medians["wall"]:.2f}s, loop {medians["loop"]:.2f}s, iters '
            f'{medians["iters"]:.0f}, env steps {medians["steps"]:.0f}, solved {sum(r["solved"] for r in sel)}/{len(sel)}'
        )
    print(f'load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores')


if __name__ == '__main__':
    main()
