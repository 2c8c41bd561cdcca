"""Time to solve CartPole (eval return mean >= 195): async IMPALA / APPO against today's serial PPO, seeds 0-2.

Each run is a fresh ``ding`` process in a temporary directory; the table gives the wall time of the summary
line (from the process start), its set-up part (imports, envs, threads: EnvPool's import alone is ~0.6 s),
the training part (the difference), the whole process, and the env steps used.

    python benchmarks/async_solve_time.py [--seeds 0 1 2] [--runs impala impala-1core appo ppo] [--timeout 300]

``impala-1core`` is the IMPALA config with ``policy.async_actor.cpu_affinity`` set to one core (the learner, actor and
EnvPool threads hand over to each other on that core).

Target (issue 12): IMPALA async <= 0.7x the wall time of serial PPO in the same run.
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
    'impala': ('async', 'cartpole_impala_config.py'),
    'impala-1core': ('async', 'cartpole_impala_config.py'),
    'appo': ('async', 'cartpole_appo_config.py'),
    'ppo': ('serial_onpolicy', 'cartpole_ppo_config.py'),
}
SUMMARY = re.compile(
    r'\[ding\] \S+: (?P<status>SOLVED|not solved[^|]*) \|.*env steps (?P<steps>\d+) \|.*wall (?P<wall>[\d.]+)s'
    r' \(set-up (?P<setup>[\d.]+)s\)'
)


ONE_CORE_CONFIG = """from dizoo.classic_control.cartpole.config.cartpole_impala_config import create_config, main_config

main_config.policy.async_actor.cpu_affinity = [{core}]
"""


def config_path(run: str, workdir: str) -> str:
    """The config file of ``run`` (the one-core variant is written into ``workdir``)."""
    if run != 'impala-1core':
        return os.path.join(CONFIGS, RUNS[run][1])
    path = os.path.join(workdir, 'cartpole_impala_1core_config.py')
    with open(path, 'w') as f:
        f.write(ONE_CORE_CONFIG.format(core=max(os.sched_getaffinity(0))))
    return path


def solve(run: str, seed: int, timeout: float) -> tuple[bool, float, float, float, int]:
    """(solved, pipeline wall s, its set-up s, process wall s, env steps) of one run."""
    mode = RUNS[run][0]
    workdir = tempfile.mkdtemp(prefix=f'ding_solve_{run}_')
    config = config_path(run, workdir)
    env = dict(os.environ, DING_PROGRESS='0', PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, '-m', 'ding.entry.cli', '-m', mode, '-c', config, '-s', str(seed)],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return False, timeout, 0.0, timeout, 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    process_wall = time.perf_counter() - start
    matches = list(SUMMARY.finditer(proc.stderr))
    if not matches:
        raise RuntimeError(f'{run} seed {seed}: no summary line (exit {proc.returncode}):\n{proc.stderr[-2000:]}')
    last = matches[-1]  # the pipeline's own summary line
    return last['status'] == 'SOLVED', float(last['wall']), float(last['setup']), process_wall, int(last['steps'])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--runs', nargs='+', default=list(RUNS), choices=list(RUNS))
    parser.add_argument('--timeout', type=float, default=300.0)
    args = parser.parse_args()
    rows, means = [], {}
    for seed in args.seeds:  # interleaved, so that load changes hit every run alike
        for run in args.runs:
            rows.append((run, seed, *solve(run, seed, args.timeout)))
    print(f'{"run":<13} {"seed":>4} {"solved":>7} {"pipeline wall s":>16} {"set-up s":>9} {"training s":>11} '
          f'{"process wall s":>15} {"env steps":>10}')  # fmt: skip
    for run, seed, solved, wall, setup, process_wall, steps in rows:
        print(f'{run:<13} {seed:>4} {str(solved):>7} {wall:>16.1f} {setup:>9.1f} {wall - setup:>11.1f} '
              f'{process_wall:>15.1f} {steps:>10}')  # fmt: skip
    training: dict[str, float] = {}
    for run in args.runs:
        means[run] = statistics.mean(r[3] for r in rows if r[0] == run)
        training[run] = statistics.mean(r[3] - r[4] for r in rows if r[0] == run)
        print(f'{run}: mean pipeline wall {means[run]:.1f} s, of it training {training[run]:.2f} s')
    if 'ppo' in means:
        for run in args.runs:
            if run != 'ppo':
                print(f'{run} / serial ppo: {means[run] / means["ppo"]:.2f}x wall, {training[run] / training["ppo"]:.2f}x '
                      'training (target for impala: <= 0.7x)')  # fmt: skip


if __name__ == '__main__':
    main()
