"""Child processes of the tests: the environment that lets them import this checkout (``ding`` and
``tests.helpers``), and finding the parallel pipeline's worker processes (a /proc scan, no psutil)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The repository root: the directory that holds ``ding`` and ``tests``."""


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child interpreter, with the repository root first on its PYTHONPATH
    (so the child imports this checkout and the test helpers named in configs) and ``extra`` variables set."""
    env = dict(os.environ)
    env['PYTHONPATH'] = ROOT + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    env.update(extra)
    return env


def worker_pids(marker: str) -> list[int]:
    """Pids of live worker processes whose command line mentions ``marker``."""
    pids = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/cmdline', 'rb') as f:
                cmd = f.read().replace(b'\0', b' ').decode(errors='replace')
            with open(f'/proc/{entry}/stat') as f:
                state = f.read().rsplit(')', 1)[1].split()[0]
        except OSError:
            continue
        if 'ding.entry.parallel_worker' in cmd and marker in cmd and state != 'Z':
            pids.append(int(entry))
    return pids


def child_pids(module: str) -> list[int]:
    """Pids of this process's live children whose command line mentions ``module`` (e.g. an actor's main)."""
    pids = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/cmdline', 'rb') as f:
                cmd = f.read().replace(b'\0', b' ').decode(errors='replace')
            with open(f'/proc/{entry}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if module in cmd and int(fields[1]) == os.getpid() and fields[0] != 'Z':
            pids.append(int(entry))
    return pids
