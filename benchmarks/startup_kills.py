"""SIGKILL ``ding -m parallel`` at random moments of its start-up and check that no process is left behind.

Each trial starts a parallel CartPole DQN run (its own process group, its own directory), waits a random
0-``--max-delay`` seconds and SIGKILLs the pipeline process alone (not its group: its workers must die of the
launcher's death by themselves, ``ding.entry.lifeline``). Then, within ``--grace`` seconds, there must be no
process of the run left: none in the pipeline's process group, none whose working directory or command line is
the run's directory (re-parented ones, PPID 1 or a subreaper, included) and no socket listening on a port of the
run (``parallel_config.json`` and the workers' ready files name them). The moment of each kill is classified by
what the run had reached: ``warm`` (warm workers starting, config not compiled), ``roles`` (config written,
workers handed their roles), ``serving`` (every worker ready), ``training`` (the coordinator's run file exists).

Target: 0 processes and 0 listening ports left after every kill.

    python benchmarks/startup_kills.py --kills 10
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_config.py')
EXP = 'startup_kills'
WORKERS = ('learner0', 'collector0', 'collector1')


def _stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` after the command name (state, ppid, pgrp, ...), None when gone."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()
    except OSError:
        return None


def run_processes(workdir: str, pgid: int) -> dict[int, str]:
    """Live processes of a run: in its process group, or working in / naming its directory. pid -> what."""
    found = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        fields = _stat(pid)
        if fields is None or fields[0] == 'Z':
            continue
        try:
            cwd = os.readlink(f'/proc/{pid}/cwd')
        except OSError:
            cwd = ''
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                cmd = f.read().replace(b'\0', b' ').decode(errors='replace')
        except OSError:
            cmd = ''
        if int(fields[2]) == pgid or cwd.startswith(workdir) or workdir in cmd:
            found[pid] = f'ppid {fields[1]} pgrp {fields[2]}: {cmd[:120]}'
    return found


def run_ports(exp_dir: str) -> set[int]:
    """Ports the run's workers were given or took (compiled config, ready files)."""
    ports: set[int] = set()
    try:
        with open(os.path.join(exp_dir, 'parallel_config.json'), encoding='utf-8') as f:
            system = json.load(f).get('system', {})
        for role in ('learner', 'collector'):
            for entry in (system.get(role) or {}).values():
                if isinstance(entry, dict) and isinstance(entry.get('port'), int) and entry['port'] > 0:
                    ports.add(entry['port'])
    except (OSError, ValueError, AttributeError):
        pass
    for path in glob.glob(os.path.join(exp_dir, 'run', '*.ready')):
        try:
            with open(path, encoding='utf-8') as f:
                port = json.load(f).get('port')
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(port, int) and port > 0:
            ports.add(port)
    return ports


def worker_names(exp_dir: str) -> dict[int, str]:
    """pid -> worker name, from the workers' ready files."""
    names = {}
    for path in glob.glob(os.path.join(exp_dir, 'run', '*.ready')):
        try:
            with open(path, encoding='utf-8') as f:
                info = json.load(f)
            names[int(info['pid'])] = str(info['name'])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return names


def log_tail(exp_dir: str, name: str, lines: int = 3) -> str:
    try:
        with open(os.path.join(exp_dir, 'log', f'{name}.log'), encoding='utf-8', errors='replace') as f:
            return ' / '.join(line.strip() for line in f.read().splitlines()[-lines:])
    except OSError:
        return ''


def listening(ports: set[int]) -> set[int]:
    """Which of ``ports`` have a socket in LISTEN state (``/proc/net/tcp``, ``tcp6``)."""
    found = set()
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 3 and cols[3] == '0A':
                port = int(cols[1].rsplit(':', 1)[1], 16)
                if port in ports:
                    found.add(port)
    return found


def moment(exp_dir: str) -> str:
    if os.path.exists(os.path.join(exp_dir, 'run.json')):
        return 'training'
    if all(os.path.exists(os.path.join(exp_dir, 'run', f'{w}.ready')) for w in WORKERS):
        return 'serving'
    if os.path.exists(os.path.join(exp_dir, 'parallel_config.json')):
        return 'roles'
    return 'warm'


def trial(delay: float, grace: float, seed: int) -> dict:
    workdir = os.path.realpath(tempfile.mkdtemp(prefix='startup_kills_'))
    cfg = os.path.join(workdir, 'cfg.py')
    with open(cfg, 'w', encoding='utf-8') as f:
        f.write(
            f'exec(open({CONFIG!r}).read())\nmain_config.exp_name = {EXP!r}\nmain_config.service = dict(enable=True)\n'
        )
    exp_dir = os.path.join(workdir, EXP)
    env = dict(os.environ, OMP_NUM_THREADS='1', DING_PROGRESS='0')
    env['PYTHONPATH'] = ROOT + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    proc = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', cfg, '-s', str(seed)],
        cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    time.sleep(delay)
    reached = moment(exp_dir)
    alive_before = len(run_processes(workdir, proc.pid)) - 1  # besides the pipeline itself
    ports = run_ports(exp_dir)
    proc.kill()
    proc.wait()
    killed_at = time.monotonic()
    left = run_processes(workdir, proc.pid)
    while left and time.monotonic() - killed_at < grace:
        time.sleep(0.1)
        left = run_processes(workdir, proc.pid)
    gone_after = time.monotonic() - killed_at
    ports |= run_ports(exp_dir)
    still_listening = listening(ports)
    names = worker_names(exp_dir)
    for pid in left:
        name = names.get(pid)
        if name:
            left[pid] = f'{name} ({left[pid]}); its log ends: {log_tail(exp_dir, name)[-400:]}'
    for pid in left:  # clean up, whatever the verdict
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(workdir, ignore_errors=True)
    return {
        'delay': delay,
        'moment': reached,
        'workers': alive_before,
        'left': left,
        'gone_after': gone_after,
        'ports': len(ports),
        'listening': still_listening,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--kills', type=int, default=10)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--max-delay', type=float, default=12.0, help='latest kill, seconds after the start')
    parser.add_argument('--grace', type=float, default=20.0, help='seconds the workers have to die')
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(
        '| # | kill at (s) | moment | processes of the run then | left after grace | all gone in (s) | '
        'run ports | still listening |'
    )
    print('|---|---|---|---|---|---|---|---|')
    bad = 0
    for i in range(1, args.kills + 1):
        r = trial(rng.uniform(0.0, args.max_delay), args.grace, args.seed)
        bad += bool(r['left'] or r['listening'])
        gone = f'{r["gone_after"]:.1f}' if not r['left'] else f'> {args.grace:.0f}'
        print(
            f'| {i} | {r["delay"]:.1f} | {r["moment"]} | {r["workers"]} | {len(r["left"])} | {gone} | '
            f'{r["ports"]} | {len(r["listening"])} |',
            flush=True,
        )
        for pid, what in r['left'].items():
            print(f'|   | left: pid {pid} {what} |')
    print()
    print(f'{bad} of {args.kills} kills left something behind; target {"MET" if bad == 0 else "NOT MET"}')


if __name__ == '__main__':
    main()
