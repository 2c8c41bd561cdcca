"""SIGKILL the learner of a parallel CartPole DQN run N times at random moments and check that no progress is
silently lost.

One ``ding -m parallel`` run (stop value 195, a learner checkpoint every ``--ckpt-every`` iterations, the run
service on so the learner's run file names its pid). Each kill waits until the (re)started learner has started
its task, then a random 2-``--max-wait`` seconds, then SIGKILLs it; the pipeline restarts it and the learner resumes. After the kills
the run must solve. From the logs, per kill: where the learner resumed from (checkpoint or policy file), at
which iteration, and the iterations lost that the learner reported at WARNING.

Targets: never "fresh weights"; iterations lost <= one checkpoint interval per kill; the run solves.

    python benchmarks/learner_kills.py --kills 5
    python benchmarks/learner_kills.py --kills 30 --seed 1 --timeout 1800
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


def write_config(path: str, ckpt_every: int) -> None:
    lines = [
        f'exec(open({CONFIG!r}).read())',
        f'main_config.exp_name = {EXP!r}',
        'main_config.env.stop_value = 195',
        'main_config.service = dict(enable=True)',
        f'main_config.policy.learn.learner.setdefault("hook", {{}}).update(save_ckpt_after_iter={ckpt_every})',
    ]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--kills', type=int, default=5)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--ckpt-every', type=int, default=100)
    parser.add_argument('--max-wait', type=float, default=6.0, help='longest wait after a (re)start before a kill')
    parser.add_argument('--timeout', type=float, default=900.0, help='seconds for the whole run')
    args = parser.parse_args()
    rng = random.Random(args.seed)
    workdir = tempfile.mkdtemp(prefix='learner_kills_')
    cfg = os.path.join(workdir, 'cfg.py')
    write_config(cfg, args.ckpt_every)
    exp_dir = os.path.join(workdir, EXP)
    env = dict(os.environ, OMP_NUM_THREADS='1')
    env['PYTHONPATH'] = ROOT + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    out = open(os.path.join(workdir, 'pipeline.log'), 'wb')
    start = time.time()
    proc = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', cfg, '-s', str(args.seed)],
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
            time.sleep(rng.uniform(2.0, args.max_wait))
            if proc.poll() is not None:
                break
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(pid)
            previous = pid
            print(f'kill {len(killed)}: learner pid {pid} at {time.time() - start:.1f}s', flush=True)
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
    pipeline = open(os.path.join(workdir, 'pipeline.log'), encoding='utf-8', errors='replace').read()
    fresh = text.count('fresh weights')
    resumes = RESUMED.findall(text)
    losses = [(int(a), b, int(c)) for a, b, c in LOST.findall(text)]
    print()
    print(f'| run dir | {workdir} |')
    print(f'| kills | {len(killed)} |')
    print(f'| resumes logged | {len(resumes)} |')
    print(f'| "fresh weights" | {fresh} |')
    print(f'| run exit code | {code} ({"solved" if code == 0 else "NOT solved"}) in {time.time() - start:.0f}s |')
    print()
    print('| # | resumed from | iteration | iterations lost (WARNING) |')
    print('|---|---|---|---|')
    for i, (path, it_a, it_b) in enumerate(resumes, 1):
        it = int(it_a or it_b)
        lost = next((c for a, _, c in losses if a == it), 0)
        print(f'| {i} | {os.path.basename(path)} | {it} | {lost} |')
    worst = max((c for _, _, c in losses), default=0)
    ok = fresh == 0 and worst <= args.ckpt_every and code == 0
    print()
    print(f'worst loss {worst} (limit {args.ckpt_every}); targets {"MET" if ok else "NOT MET"}')
    if code != 0:
        print(pipeline[-2000:])


if __name__ == '__main__':
    main()
