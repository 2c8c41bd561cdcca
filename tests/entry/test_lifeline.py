"""No orphans: a process the pipeline launches dies with it (``ding.entry.lifeline``), whenever the
pipeline dies: before the config is compiled, while workers are handed their roles, or once they serve."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ding.entry.lifeline import LAUNCHER_PID_ENV, die_with_launcher
from tests.helpers.processes import child_env, worker_pids
from tests.helpers.wait import wait_until

CHILD = textwrap.dedent("""
    import sys, time
    from ding.entry.lifeline import die_with_launcher
    launcher = die_with_launcher()
    print('armed', launcher, flush=True)
    time.sleep(600)
""")

MIDDLE = textwrap.dedent("""
    import os, subprocess, sys, time
    from ding.entry.lifeline import launcher_env
    child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], env=launcher_env(dict(os.environ)),
                             stdout=subprocess.PIPE, text=True)
    print(child.pid, child.stdout.readline().strip(), flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def test_a_process_started_by_hand_is_left_alone(monkeypatch):
    monkeypatch.delenv(LAUNCHER_PID_ENV, raising=False)
    assert die_with_launcher() is None


def test_a_child_whose_launcher_is_already_gone_exits_at_once():
    # Its launcher is not its parent any more (here: never was): it died before the child armed the signal.
    done = subprocess.run(
        [sys.executable, '-c', CHILD],
        env=child_env(**{LAUNCHER_PID_ENV: '1'}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and 'armed' not in done.stdout
    assert '(pid 1) is gone; exiting' in done.stderr


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='PR_SET_PDEATHSIG is Linux only')
def test_a_child_dies_with_its_sigkilled_launcher():
    middle = subprocess.Popen([sys.executable, '-c', MIDDLE, CHILD], env=child_env(), stdout=subprocess.PIPE, text=True)
    child_pid = None
    try:
        pid, word, launcher = middle.stdout.readline().split()
        child_pid = int(pid)
        assert (word, int(launcher)) == ('armed', middle.pid)
        assert _alive(child_pid)
        middle.kill()
        middle.wait(30)
        assert wait_until(lambda: not _alive(child_pid), 10, what='the child to die with its launcher')
    finally:
        if middle.poll() is None:
            middle.kill()
            middle.wait()
        if child_pid is not None and _alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)


PIPELINE_CONFIG = """
from tests.helpers.toy_workers import toy_config

main_config, create_config, system_config = toy_config('toy_orphans', collector_num=1, stop_value=1e9)
"""


def _compiled(tmp_path) -> bool:
    return (tmp_path / 'toy_orphans' / 'parallel_config.json').exists()


def _serving(tmp_path) -> bool:
    run = tmp_path / 'toy_orphans' / 'run'
    return all((run / f'{name}.ready').exists() for name in ('learner0', 'collector0'))


# When to kill the pipeline: its warm workers are up but nothing is compiled; the workers were just handed
# their roles (the config they read is written right before); every worker serves.
MOMENTS = {
    'before_compile': lambda tmp_path: bool(worker_pids(str(tmp_path))) and not _compiled(tmp_path),
    'handing_roles': _compiled,
    'serving': _serving,
}


@pytest.mark.slow
@pytest.mark.parametrize('moment', list(MOMENTS))
def test_a_sigkilled_pipeline_leaves_no_worker_at_any_moment_of_start_up(tmp_path, moment):
    (tmp_path / 'orphans_config.py').write_text(PIPELINE_CONFIG)
    pipeline = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', 'orphans_config.py', '-s', '0'],
        cwd=tmp_path,
        env=child_env(DING_PROGRESS='0'),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        reached = MOMENTS[moment]
        deadline = time.time() + 120
        while not reached(tmp_path) and pipeline.poll() is None and time.time() < deadline:
            time.sleep(0.002)
        assert reached(tmp_path), f'the pipeline never reached the moment {moment!r}'
        pipeline.kill()
        pipeline.wait(30)
        assert wait_until(lambda: worker_pids(str(tmp_path)) == [], 15, what='every worker process to end')
    finally:
        if pipeline.poll() is None:
            pipeline.kill()
            pipeline.wait()
        for pid in worker_pids(str(tmp_path)):
            os.kill(pid, signal.SIGKILL)
