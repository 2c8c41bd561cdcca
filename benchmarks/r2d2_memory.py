"""R2D2 against DQN on CartPole with the velocities masked (``env.wrappers=['mask_velocity']``): a memory task.

The observation keeps the cart position and the pole angle only; balancing needs their rates of change, which a
recurrent Q network can estimate from the history and a feed-forward one cannot. Both algorithms run their
shipped dizoo CartPole config with the masked observation (``model.obs_shape=2``), stop value 195, through the
serial pipeline, each run in a fresh process. Usage::

    python benchmarks/r2d2_memory.py                           # r2d2 and dqn x seeds 0 1 2, 150k env steps
    python benchmarks/r2d2_memory.py --algos r2d2 --seeds 0 --max-env-step 80000
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {
    'r2d2': 'dizoo.classic_control.cartpole.config.cartpole_r2d2_config',
    'dqn': 'dizoo.classic_control.cartpole.config.cartpole_dqn_config',
}
SUMMARY = re.compile(
    r'\[ding\] (?P<exp>\S+): (?P<status>SOLVED|not solved[^|]*?) ?\|.*env steps (?P<steps>\d+) \| '
    r'train iters (?P<iters>\d+) \| wall (?P<wall>[\d.]+)s \| best eval return (?P<best>\S+)'
)


def run_in_this_process(algo: str, seed: int, max_env_step: int) -> None:
    """One masked-CartPole run (the child process's job); the pipeline prints its summary line."""
    sys.path.insert(0, ROOT)
    from ding.entry import serial_pipeline

    module = importlib.import_module(CONFIGS[algo])
    main_config = copy.deepcopy(module.main_config)
    main_config.exp_name = f'masked_{algo}_seed{seed}'
    main_config.env.wrappers = ['mask_velocity']
    main_config.env.stop_value = 195
    main_config.policy.model.obs_shape = 2
    serial_pipeline((main_config, copy.deepcopy(module.create_config)), seed=seed, max_env_step=max_env_step)


def run_once(algo: str, seed: int, max_env_step: int, workdir: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), '--child', algo, str(seed), '--max-env-step', str(max_env_step)]
    env = dict(os.environ, DING_PROGRESS='0', PYTHONPATH=ROOT, OMP_NUM_THREADS='1')
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    match = SUMMARY.search(proc.stderr)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f'{algo} seed {seed} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}')
    return dict(
        algo=algo,
        seed=seed,
        solved=match['status'] == 'SOLVED',
        steps=int(match['steps']),
        iters=int(match['iters']),
        run_wall=float(match['wall']),
        wall=wall,
        best=float(match['best']),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--algos', nargs='+', default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--max-env-step', type=int, default=150_000, help='give up after this many env steps')
    parser.add_argument('--child', nargs=2, metavar=('ALGO', 'SEED'), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_in_this_process(args.child[0], int(args.child[1]), args.max_env_step)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix='ding_r2d2_memory_') as workdir:
        for algo in args.algos:
            for seed in args.seeds:
                row = run_once(algo, seed, args.max_env_step, workdir)
                rows.append(row)
                print(f'  {algo} seed {seed}: best {row["best"]:.1f} after {row["steps"]} env steps', file=sys.stderr)
    header = (
        f'{"algo":<5} {"seed":>4} {"solved":>6} {"env steps":>9} {"iters":>6} {"run s":>7} {"wall s":>7} {"best":>6}'
    )
    print(f'masked-velocity CartPole (obs: x, theta), stop value 195, budget {args.max_env_step} env steps')
    print(header)
    print('-' * len(header))
    for r in rows:
        print(
            f'{r["algo"]:<5} {r["seed"]:>4} {str(r["solved"]):>6} {r["steps"]:>9} {r["iters"]:>6} '
            f'{r["run_wall"]:>7.1f} {r["wall"]:>7.1f} {r["best"]:>6.1f}'
        )


if __name__ == '__main__':
    main()
