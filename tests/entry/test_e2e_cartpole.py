"""``ding -m parallel`` on CartPole DQN to the stop value, with the real learner and collectors: one run checked by
the tests below (each start of a parallel CartPole run costs tens of seconds on a loaded machine).

The CLI runs in a subprocess, as a user types it (``ding -m parallel -c <config> -s 0``), on a config that is the
shipped one with the run service on and the weights over HTTP: collectors look for policy files in a directory
nobody writes to, so they can only act with the learner's weights if they fetch them. A collector is SIGKILLed in
its first collect task. The run must still reach the stop value (which needs trained weights: an untrained
Q-network's greedy policy stays far below), the pipeline must restart the collector and no worker may be left. The
file transport solves CartPole in tests/entry/test_parallel_multi_learner.py; an undisturbed toy run in
test_parallel_entry.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.processes import ROOT, child_env, worker_pids
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow
CONFIG = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_config.py')
EXP = 'cartpole_dqn_parallel'
# Most runs solve in 6-15 s; asynchronous DQN has a tail (the greedy return can hover at 150-190 for a while)
# that sometimes takes a few minutes. Speed is measured by benchmarks/parallel_cartpole.py, not here.
RUN_BUDGET = 360
SUMMARY = re.compile(rf'\[ding\] {EXP}: SOLVED \| stop value 195 \| env steps (\d+) \| train iters (\d+)')
USER_CONFIG = """\
base = {config!r}
main_config = dict(
    service=dict(enable=True),
    policy=dict(collect=dict(collector=dict(policy_transport='http', weights_refresh='subscribe'))),
)
system_config = dict(collector=dict(collector0=dict(path_policy={nowhere!r}), collector1=dict(path_policy={nowhere!r})))
"""


@dataclass
class CliRun:
    """What the module's one run left behind."""

    cwd: Path
    returncode: int
    stderr: str
    coordinator_log: str
    left: list[int]  # worker processes still alive after the pipeline ended

    @property
    def exp_dir(self) -> Path:
        return self.cwd / EXP


def _coordinator_says(log_path: Path, text: str) -> bool:
    return log_path.exists() and text in log_path.read_text(errors='replace')


@pytest.fixture(scope='module')
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliRun]:
    cwd = tmp_path_factory.mktemp('e2e_cartpole')
    config = cwd / 'cartpole_http_config.py'
    config.write_text(USER_CONFIG.format(config=CONFIG, nowhere=str(cwd / 'no_policy_here')))
    with open(cwd / 'stderr.txt', 'wb') as err:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', str(config), '-s', '0'],
            cwd=cwd,
            env=child_env(DING_PROGRESS='0', DING_QUIET='1', OMP_NUM_THREADS='1'),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    ready = cwd / EXP / 'run' / 'collector0.ready'
    log_path = cwd / EXP / 'log' / 'coordinator' / 'coordinator_logger.txt'
    try:
        # Kill collector0 in its first collect task: a fixed delay could let the run reach the stop value first.
        first_task = lambda: ready.exists() and _coordinator_says(log_path, 'started on collector0')  # noqa: E731
        wait_until(first_task, 120, interval=0.05, what="collector0's first collect task", proc=proc)
        os.kill(json.loads(ready.read_text())['pid'], signal.SIGKILL)
        try:
            proc.wait(RUN_BUDGET)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the pipeline stops its workers on SIGTERM; the tests report it
            proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    yield CliRun(
        cwd=cwd,
        returncode=proc.returncode,
        stderr=(cwd / 'stderr.txt').read_text(errors='replace'),
        coordinator_log=log_path.read_text(errors='replace') if log_path.exists() else '',
        left=worker_pids(str(cwd)),
    )


def test_the_cli_run_reaches_the_stop_value_despite_a_sigkilled_collector(run: CliRun) -> None:
    assert run.returncode == 0, run.stderr[-3000:]
    assert SUMMARY.search(run.stderr), run.stderr[-3000:]
    assert 'collector0 reported dead by the pipeline' in run.coordinator_log
    # the pipeline relaunched the process (the run may reach the stop value before the new one reconnects)
    assert 'collector collector0 exited with code -9: restarted it (restart 1)' in run.coordinator_log


def test_the_collectors_acted_on_weights_fetched_over_http(run: CliRun) -> None:
    nowhere = run.cwd / 'no_policy_here'
    assert not nowhere.exists() or not os.listdir(nowhere)
    logs = ''.join(p.read_text(errors='replace') for p in (run.exp_dir / 'log').rglob('*.txt'))
    assert re.search(r'loaded policy_iter [1-9]\d* from 127\.0\.0\.1:\d+', logs), logs[-3000:]
    # Subscribed to the learner's weights stream with the run secret's token; every version's signature checked.
    assert 'polling instead' not in logs, logs[-3000:]
    assert not re.search(r'weights refused|not newer than the loaded', logs), logs[-3000:]


def test_nothing_is_left_behind(run: CliRun) -> None:
    assert run.left == []
    assert (run.exp_dir / 'total_config.py').is_file()
    assert not (run.exp_dir / 'run').exists()
