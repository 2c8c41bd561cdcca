"""Short real ``ding`` runs whose console output and run records the console, plot and summary tests read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

from tests.helpers.processes import ROOT, child_env

DQN_CONFIG = os.path.join(ROOT, 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py')
ES_CONFIG = os.path.join(ROOT, 'dizoo/classic_control/cartpole/config/cartpole_es_config.py')


def run_ding_console(args: list[str], cwd, timeout: float = 240) -> subprocess.CompletedProcess:
    """``ding ARGS`` as a user runs it in a terminal-less shell: the progress bar on, nothing made quieter by
    the test suite's environment."""
    env = child_env(OMP_NUM_THREADS='1')
    for name in ('DING_PROGRESS', 'DING_QUIET', 'DING_CONSOLE'):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, '-m', 'ding.entry.cli', *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def console_lines(stderr: str, bar_names: str) -> list[str]:
    """The lines a terminal would keep: each ``\\r``-separated piece, without the progress bars' redraws (pieces
    starting with a bar's name: ``bar_names`` is a regular expression) and blank ones."""
    bar = re.compile(rf'^(?:{bar_names}): ')
    pieces = (piece.strip() for line in stderr.split('\n') for piece in line.split('\r'))
    return [p for p in pieces if p and not bar.match(p)]


def duplicated(lines: list[str]) -> list[str]:
    return [line for line, n in Counter(lines).items() if n > 1]
