"""``ding -m parallel`` on CartPole DQN to the stop value, with the real learner and collectors.

Runs the CLI in a subprocess (what a user types: ``ding -m parallel -c <config> -s 0``), SIGKILLs a collector
in its first collect task, and checks that the run still reaches the stop value, that the pipeline restarted the
collector, and that no worker process is left. (One run makes both points: a run that survives the kill also shows
the undisturbed path to the stop value; tests/entry/test_parallel_entry.py checks an undisturbed toy run.)
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.processes import ROOT, child_env, worker_pids

pytestmark = pytest.mark.slow
CONFIG = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_config.py')
EXP = 'cartpole_dqn_parallel'
# Most runs solve in 6-15 s; asynchronous DQN has a tail (the greedy return can hover at 150-190 for a while)
# that sometimes takes a few minutes. Speed is measured by benchmarks/parallel_cartpole.py, not here.
RUN_BUDGET = 360
SUMMARY = re.compile(
    r'\[ding\] cartpole_dqn_parallel: SOLVED \| stop value 195 \| '
    r'env steps (\d+) \| train iters (\d+)'
)


def start_cli(cwd):
    env = child_env(DING_PROGRESS='0', DING_QUIET='1')
    return subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', CONFIG, '-s', '0'],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc, timeout):
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the pipeline stops its workers on SIGTERM
        _, err = proc.communicate(timeout=30)
        pytest.fail(f'no stop value within {timeout}s:\n{err[-3000:]}')
    return err


def test_cli_parallel_cartpole_reaches_the_stop_value_despite_a_sigkilled_collector(tmp_path):
    proc = start_cli(tmp_path)
    ready = tmp_path / EXP / 'run' / 'collector0.ready'
    log_path = tmp_path / EXP / 'log' / 'coordinator' / 'coordinator_logger.txt'
    try:
        deadline = time.time() + 120
        while not ready.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        victim = json.loads(ready.read_text())['pid']
        # Kill it in its first collect task: a fixed delay could let the run reach the stop value first.
        while (
            time.time() < deadline
            and proc.poll() is None
            and not (log_path.exists() and 'started on collector0' in log_path.read_text())
        ):
            time.sleep(0.05)
        os.kill(victim, signal.SIGKILL)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    err = finish(proc, RUN_BUDGET)
    assert proc.returncode == 0, err[-3000:]
    assert SUMMARY.search(err), err[-3000:]
    log = log_path.read_text()
    assert 'collector0 reported dead by the pipeline' in log
    # the pipeline relaunched the process (the run may reach the stop value before the new one reconnects)
    assert 'collector collector0 exited with code -9: restarted it (restart 1)' in log
    assert worker_pids(str(tmp_path)) == []
    assert os.path.isfile(tmp_path / EXP / 'total_config.py')
    policies = [n for n in os.listdir(tmp_path / EXP / 'policy') if n.endswith('.safetensors')]
    assert len(policies) == 1  # one learner task, one published policy
