"""The parallel pipeline with real worker processes (toy comm workers): end of run, restarts, clean exits.

Each test starts a learner and two collector processes (``python -m ding.entry.parallel_worker``), so
the file is marked slow.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from ding.config.loader import read_config
from ding.config.parallel import compile_config_parallel
from ding.entry.parallel_entry import WorkerProcess, parallel_pipeline, stop_workers
from ding.entry.parallel_worker import EXIT_PORT_IN_USE
from ding.interaction.base.auth import new_run_secret
from ding.worker.coordinator.coordinator import Coordinator
from tests.helpers.parallel_run import PipelineThread, ready_pid
from tests.helpers.processes import child_env, worker_pids
from tests.helpers.toy_workers import toy_config
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow
# The run secret of the tests that launch worker processes themselves (the pipeline makes its own).
SECRET = new_run_secret()


def listening(port: int) -> bool:
    try:
        socket.create_connection(('127.0.0.1', port), timeout=0.5).close()
        return True
    except OSError:
        return False


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv('DING_PROGRESS', '0')


def test_pipeline_reaches_the_stop_value_and_leaves_nothing_behind(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    result = parallel_pipeline(toy_config('toy_e2e', stop_value=20), seed=0)
    assert result.solved and result.train_iter >= 20 and result.best_eval_return >= 20
    assert result.restarts == {'learner0': 0, 'collector0': 0, 'collector1': 0}
    assert '[ding] toy_e2e: SOLVED | stop value 20 |' in capfd.readouterr().err
    assert worker_pids(str(tmp_path)) == []
    main, create, system = read_config('toy_e2e/total_config.py')  # the compiled config reads back
    ports = [system.coordinator.port] + [e.port for k in ('learner', 'collector') for e in system[k].values()]
    assert not any(listening(p) for p in ports)
    assert not os.path.exists('toy_e2e/run')
    assert os.path.getsize('toy_e2e/log/learner0.log') > 0


def test_a_coordinator_port_taken_after_it_was_chosen_is_replaced(tmp_path, monkeypatch):
    """``port_auto`` (what the compiler records for ``port: 'auto'``) with the chosen port held by someone else."""
    monkeypatch.chdir(tmp_path)
    with socket.create_server(('127.0.0.1', 0)) as holder:
        taken = holder.getsockname()[1]
        cfg = toy_config('toy_port', stop_value=5, coordinator=dict(port=taken, port_auto=True))
        result = parallel_pipeline(cfg, seed=0)
    assert result.solved
    with open('toy_port/parallel_config.json', encoding='utf-8') as f:
        port = json.load(f)['system']['coordinator']['port']  # what the workers read: the port it got
    assert port != taken
    log = open('toy_port/log/coordinator/coordinator_logger.txt', encoding='utf-8').read()
    assert f'port {taken}' in log and f'listening on port {port} instead' in log


def test_sigkilled_collector_and_learner_are_restarted_and_the_run_completes(tmp_path, monkeypatch):
    """Both kinds of worker killed in one run (a run's start, three worker processes, is the slow part): the
    pipeline restarts each once, the learner resumes from the weights it published, and the run still solves."""
    monkeypatch.chdir(tmp_path)
    cfg = toy_config(
        'toy_kill',
        stop_value=60,
        collector_extra=dict(calls_per_task=50, step_sleep=0.05),
        learner_extra=dict(iter_sleep=0.05),
    )
    with PipelineThread(cfg) as run:
        assert wait_until(lambda: all(ready_pid('toy_kill', n) for n in ('collector0', 'learner0')), 120)
        collector, learner = ready_pid('toy_kill', 'collector0'), ready_pid('toy_kill', 'learner0')
        assert wait_until(lambda: any(n.endswith('.safetensors') for n in os.listdir('toy_kill/policy')), 60)
        time.sleep(1.0)  # mid-run: collecting and learning
        os.kill(collector, signal.SIGKILL)
        os.kill(learner, signal.SIGKILL)
    result = run.result
    assert result.solved
    assert result.restarts['collector0'] == 1 and result.restarts['learner0'] == 1
    assert any(f['worker'] == 'collector0' for f in result.summary['failed_tasks'])
    assert [f['kind'] for f in result.summary['failed_tasks']].count('learner') == 1
    assert worker_pids(str(tmp_path)) == []


PIPELINE_SCRIPT = textwrap.dedent("""
    from tests.helpers.toy_workers import toy_config
    from ding.entry.parallel_entry import parallel_pipeline
    parallel_pipeline(toy_config({exp!r}, collector_num=1, stop_value=1e9), seed=0)
""")


def test_a_sigtermed_pipeline_leaves_no_worker_behind(tmp_path):
    """A SIGKILLed pipeline leaves no worker either: tests/entry/test_lifeline.py kills one at each moment of its
    start-up, the last once every worker serves, as here."""
    exp = 'toy_sigterm'
    env = child_env(DING_PROGRESS='0')
    proc = subprocess.Popen(
        [sys.executable, '-c', PIPELINE_SCRIPT.format(exp=exp)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        names = ('learner0', 'collector0')
        assert wait_until(lambda: all(ready_pid(tmp_path / exp, n) for n in names), 120)
        assert len(worker_pids(str(tmp_path))) == 2
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        assert b'not solved (interrupted)' in proc.stderr.read()
        # Each closes gracefully (a learner stops its task within stop_timeout, 10 s): 40 s on a loaded machine.
        wait_until(lambda: worker_pids(str(tmp_path)) == [], 40, what='every worker process to end')
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in worker_pids(str(tmp_path)):
            os.kill(pid, signal.SIGKILL)


def test_a_worker_whose_port_is_taken_exits_with_its_own_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = compile_config_parallel(*toy_config('toy_port'), seed=0)
    holder = socket.socket()
    holder.bind(('127.0.0.1', 0))
    holder.listen()
    try:
        cfg.system.collector.collector0.port = holder.getsockname()[1]
        path = tmp_path / 'cfg.json'
        path.write_text(json.dumps(cfg))
        code = subprocess.run(
            [
                sys.executable,
                '-m',
                'ding.entry.parallel_worker',
                '--role',
                'collector',
                '--name',
                'collector0',
                '--config',
                str(path),
            ],
            cwd=tmp_path,
            timeout=120,
            env=child_env(DING_RUN_SECRET=SECRET),
            capture_output=True,
        ).returncode
    finally:
        holder.close()
    assert code == EXIT_PORT_IN_USE


def test_heartbeats_reveal_a_killed_worker_without_help_from_the_pipeline(tmp_path, monkeypatch):
    """No supervisor here: only the interaction layer can tell the coordinator that collector0 is gone."""
    monkeypatch.chdir(tmp_path)
    cfg = compile_config_parallel(
        *toy_config(
            'toy_hb', collector_num=1, stop_value=1e9, collector_extra=dict(calls_per_task=1000, step_sleep=0.05)
        ),
        seed=0,
    )
    config_json = tmp_path / 'parallel_config.json'
    config_json.write_text(json.dumps(cfg))
    os.makedirs('run', exist_ok=True)
    workers = [
        WorkerProcess(role, name, str(config_json), 'run', '.', secret=SECRET)
        for role in ('learner', 'collector')
        for name in cfg.system[role]
    ]
    coordinator = None
    try:
        for w in workers:
            w.launch()
        assert wait_until(lambda: all(w.check_ready() for w in workers), 120)
        coordinator = Coordinator(cfg, secret=SECRET)
        coordinator.start()
        assert wait_until(lambda: coordinator.train_iter > 2, 30)
        victim = next(w for w in workers if w.name == 'collector0')
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.time()
        assert wait_until(lambda: any(f['worker'] == 'collector0' for f in coordinator.summary()['failed_tasks']), 30)
        assert time.time() - killed_at < 30
    finally:
        if coordinator is not None:
            coordinator.close()
        stop_workers(workers)
    assert worker_pids(str(tmp_path)) == []
