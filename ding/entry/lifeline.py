"""A child process of the pipeline dies with it: no worker is left behind when the pipeline is killed.

The launcher puts its pid in the child's environment (``launcher_env``). The child's first step,
``die_with_launcher()``, asks Linux to send it SIGTERM when that launcher dies (``PR_SET_PDEATHSIG``,
through libc's ``prctl``), then checks that the launcher is still its parent: one that died before the
signal was armed has already handed the child to another parent, and the child exits at once. A process
started by hand (no launcher pid in its environment, e.g. a worker on another machine) is left alone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

LAUNCHER_PID_ENV = 'DING_LAUNCHER_PID'
"""Environment variable holding the pid of the process that launched this one and that it dies with."""

# From <linux/prctl.h>: the signal this process gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1


def launcher_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this process named as the launcher that a child started with it dies with."""
    env[LAUNCHER_PID_ENV] = str(os.getpid())
    return env


def die_with_launcher(sig: signal.Signals = signal.SIGTERM) -> int | None:
    """Arrange to receive ``sig`` when the launcher named in the environment dies, and exit now if it
    has died already. Returns the launcher's pid (None: no launcher named, nothing done). The variable is
    removed from the environment so that this process's own children do not take it for theirs."""
    value = os.environ.pop(LAUNCHER_PID_ENV, '')
    if not value.isdigit():
        return None
    launcher = int(value)
    set_parent_death_signal(sig)
    if os.getppid() != launcher:
        print(
            f'{os.path.basename(sys.argv[0] or "ding")} (pid {os.getpid()}): the process that launched it '
            f'(pid {launcher}) is gone; exiting',
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(0)
    return launcher


def set_parent_death_signal(sig: signal.Signals) -> bool:
    """Linux only: have the kernel send ``sig`` to this process when its parent dies. False where the
    platform has no such call (the caller then relies on watching its parent pid)."""
    if not sys.platform.startswith('linux'):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(int(sig)), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        print(f'prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}', file=sys.stderr, flush=True)
        return False
    return True


__all__ = ['LAUNCHER_PID_ENV', 'launcher_env', 'die_with_launcher', 'set_parent_death_signal']
