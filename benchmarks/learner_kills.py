"""SIGKILL the learner of parallel CartPole DQN runs at random moments and check that no progress is silently lost.

One ``ding -m parallel`` run per ``--seeds`` value (stop value 195, a learner checkpoint every ``--ckpt-every``
iterations, the run service on so the learner's run file names its pid), ``--kills`` kills in each: the pipeline
restarts a worker at most 5 times (``MAX_RESTARTS``), so 30 kills take six runs of 5. Each kill waits until the
(re)started learner has started its task, then a random ``--min-wait``-``--max-wait`` seconds, then SIGKILLs it;
the pipeline restarts it and the learner resumes. A smaller ``--learning-rate`` makes a run last long enough for
its kills. After its kills each run must solve. From the logs, per kill: where the learner resumed from
(checkpoint or policy file), at which iteration, and the iterations lost that the learner reported at WARNING.

Targets: never "fresh weights"; iterations lost <= one checkpoint interval per kill; every run solves.

    python benchmarks/learner_kills.py --kills 5
    python benchmarks/learner_kills.py --kills 5 --seeds 1 2 3 4 5 6 --learning-rate 0.0002 --timeout 600
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_config.py')
EXP = 'learner_kills'
RESUMED = re.compile(r'resumed from (\S+?)(?: \(iteration (\d+)| at iteration (\d+))')
LOST = re.compile(r'resumed at iteration (\d+) from (\S+); (\d+) iterations of training lost')


def write_config(path: str, ckpt_every: int, learning_rate: float | None) -> None:
    lines = [
        f'exec(open({CONFIG!r}).read())',
        f'main_config.exp_name = {EXP!r}',
        'main_config.env.stop_value = 195',
        'main_config.service = dict(enable=True)',
        f'main_config.policy.learn.learner.setdefault("hook", {{}}).update(save_ckpt_after_iter={ckpt_every})',
    ]
    if learning_rate is not None:
        lines.append(f'main_config.policy.learn.learning_rate = {learning_rate!r}')
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')


def learner_pid(exp_dir: str) -> int | None:
    try:
        with open(os.path.join(exp_dir, 'run_learner0.json'), encoding='utf-8') as f:
            return int(json.load(f)['pid'])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def tasks_started(exp_dir: str) -> int:
    path = os.path.join(exp_dir, 'log', 'comm_learner0', 'comm_learner0_logger.txt')
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            return f.read().count(' started at iteration ')
    except OSError:
        return 0


def logs_text(exp_dir: str) -> str:
    parts = []
    for path in sorted(glob.glob(os.path.join(exp_dir, 'log', '**', '*_logger.txt'), recursive=True)):
        if os.path.isfile(path):
            with open(path, encoding='utf-8', errors='replace') as f:
                parts.append(f.read())
    return '\n'.join(parts)


def run_once(seed: int, args: argparse.Namespace, rng: random.Random) -> dict:
    """One run with ``args.kills`` learner kills; what the logs say about them."""
    workdir = tempfile.mkdtemp(prefix='learner_kills_')
    cfg = os.path.join(workdir, 'cfg.py')
    write_config(cfg, args.ckpt_every, args.learning_rate)
    exp_dir = os.path.join(workdir, EXP)
    env = dict(os.environ, OMP_NUM_THREADS='1')
    env['PYTHONPATH'] = ROOT + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    out = open(os.path.join(workdir, 'pipeline.log'), 'wb')
    start = time.time()
    proc = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', cfg, '-s', str(seed)],
        cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    killed: list[int] = []
    try:
        previous = None
        while len(killed) < args.kills and proc.poll() is None and time.time() - start < args.timeout:
            pid = learner_pid(exp_dir)
            # kill only a learner that is training: its task started after the previous kill
            if pid is None or pid == previous or tasks_started(exp_dir) <= len(killed):
                time.sleep(0.2)
                continue
            time.sleep(rng.uniform(args.min_wait, args.max_wait))
            if proc.poll() is not None:
                break
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(pid)
            previous = pid
            print(f'seed {seed} kill {len(killed)}: learner pid {pid} at {time.time() - start:.1f}s', flush=True)
        remaining = max(1.0, args.timeout - (time.time() - start))
        try:
            code = proc.wait(remaining)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        out.close()
    text = logs_text(exp_dir)
    with open(os.path.join(workdir, 'pipeline.log'), encoding='utf-8', errors='replace') as f:
        pipeline = f.read()
    return {
        'seed': seed,
        'workdir': workdir,
        'kills': len(killed),
        'fresh': text.count('fresh weights'),
        'resumes': RESUMED.findall(text),
        'losses': [(int(a), b, int(c)) for a, b, c in LOST.findall(text)],
        'code': code,
        'elapsed': time.time() - start,
        'tail': pipeline[-2000:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--kills', type=int, default=5, help='kills per run (the pipeline restarts a worker 5 times)')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0], help='one run per seed')
    parser.add_argument('--ckpt-every', type=int, default=100)
    parser.add_argument('--learning-rate', type=float, default=None, help="default: the config's")
    parser.add_argument('--min-wait', type=float, default=2.0, help='shortest wait after a (re)start before a kill')
    parser.add_argument('--max-wait', type=float, default=6.0, help='longest wait after a (re)start before a kill')
    parser.add_argument('--timeout', type=float, default=900.0, help='seconds for each run')
    args = parser.parse_args()
    runs = [run_once(seed, args, random.Random(seed)) for seed in args.seeds]
    print()
    print('| seed | kills | resumes logged | "fresh weights" | worst loss | exit code | wall (s) |')
    print('|---|---|---|---|---|---|---|')
    for r in runs:
        worst = max((c for _, _, c in r['losses']), default=0)
        solved = 'solved' if r['code'] == 0 else 'NOT solved'
        print(
            f'| {r["seed"]} | {r["kills"]} | {len(r["resumes"])} | {r["fresh"]} | {worst} | {r["code"]} ({solved}) '
            f'| {r["elapsed"]:.0f} |'
        )
    print()
    print('| seed | # | resumed from | iteration | iterations lost (WARNING) |')
    print('|---|---|---|---|---|')
    for r in runs:
        for i, (path, it_a, it_b) in enumerate(r['resumes'], 1):
            it = int(it_a or it_b)
            lost = next((c for a, _, c in r['losses'] if a == it), 0)
            print(f'| {r["seed"]} | {i} | {os.path.basename(path)} | {it} | {lost} |')
    kills = sum(r['kills'] for r in runs)
    resumes = sum(len(r['resumes']) for r in runs)
    fresh = sum(r['fresh'] for r in runs)
    worst = max((c for r in runs for _, _, c in r['losses']), default=0)
    all_solved = all(r['code'] == 0 for r in runs)
    ok = fresh == 0 and worst <= args.ckpt_every and all_solved
    print()
    print(
        f'{kills} kills in {len(runs)} runs, {resumes} resumes logged, {fresh} "fresh weights", worst loss {worst} '
        f'(limit {args.ckpt_every}), {"every run solved" if all_solved else "NOT every run solved"}; '
        f'targets {"MET" if ok else "NOT MET"}'
    )
    for r in runs:
        if r['code'] != 0:
            print(f'seed {r["seed"]} ({r["workdir"]}):\n{r["tail"]}')


if __name__ == '__main__':
    main()
