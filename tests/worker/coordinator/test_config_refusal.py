"""A learner task refused for its config, or ended because the disk refused one of its files, ends the run with that
reason at once; other refusals are retried."""

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from ding.config.errors import CONFIG_REFUSAL
from ding.config.parallel import compile_config_parallel
from ding.interaction import TaskFail
from ding.utils.atomic_file import STORAGE_REFUSAL
from ding.worker.coordinator.coordinator import Coordinator
from tests.helpers.processes import ROOT, child_env, worker_pids
from tests.helpers.refusing_policy import COLLECT_REFUSAL, REFUSAL
from tests.helpers.toy_workers import ToyCollectorSlave, ToyLearnerSlave, toy_config


class RefusingLearner(ToyLearnerSlave):
    """A toy learner that fails every start task with ``flag`` set in its result (a config or storage refusal), or
    as another failure (``flag`` None)."""

    def __init__(self, flag: str | None) -> None:
        super().__init__()
        self.flag = flag
        self.refused = 0

    def _process_task(self, task: dict[str, Any]) -> dict[str, Any]:
        if task.get('name') == 'learner_start_task':
            self.refused += 1
            result = {self.flag: True} if self.flag else None
            message = {
                STORAGE_REFUSAL: 'cannot write checkpoint ./exp/ckpt_learner0/iteration_0.safetensors (No space left '
                'on device); the learner state of iteration 0 was NOT saved'
            }.get(self.flag or '', "learner config 'comm_batches' must be a positive integer, got 0")
            raise TaskFail(result, message=message)
        return super()._process_task(task)


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """``cluster(flag)``: a coordinator driving a refusing learner and a toy collector over HTTP."""
    monkeypatch.chdir(tmp_path)
    started: list[Any] = []

    def make(flag: str | None) -> tuple[Coordinator, RefusingLearner]:
        main, create, system = toy_config('refusal', collector_num=1, coordinator=dict(retry_delay=0.05))
        cfg = compile_config_parallel(main, create, system, seed=0)
        learner, collector = RefusingLearner(flag), ToyCollectorSlave()
        for kind, slave in (('learner', learner), ('collector', collector)):
            slave.start()
            started.append(slave)
            cfg.system.coordinator[kind][f'{kind}0'] = [f'{kind}0', '127.0.0.1', slave.port]
            cfg.system[kind][f'{kind}0'].port = slave.port
        coordinator = Coordinator(cfg)
        started.append(coordinator)
        return coordinator, learner

    yield make
    for item in reversed(started):
        item.close()


def _run(coordinator: Coordinator, timeout: float) -> None:
    coordinator.start()
    deadline = time.time() + timeout
    while not coordinator.system_shutdown_flag and time.time() < deadline:
        time.sleep(0.05)


def test_a_config_refusal_ends_the_run_with_its_reason(cluster):
    coordinator, learner = cluster(CONFIG_REFUSAL)
    _run(coordinator, timeout=20.0)
    assert coordinator.system_shutdown_flag, 'the run did not end after a config refusal'
    assert learner.refused == 1  # not requeued
    refusal = coordinator.config_refusal
    assert refusal is not None and "'comm_batches' must be a positive integer" in refusal
    assert coordinator.shutdown_reason == refusal and not coordinator.solved
    coordinator.close()
    failed = coordinator.summary()['failed_tasks']
    assert [(f['kind'], f['config_error']) for f in failed] == [('learner', True)]


def test_other_refusals_are_retried(cluster):
    coordinator, learner = cluster(None)
    _run(coordinator, timeout=3.0)
    assert learner.refused > 1
    assert coordinator.config_refusal is None and coordinator.storage_refusal is None


def test_a_storage_refusal_ends_the_run_naming_what_was_not_saved(cluster):
    coordinator, learner = cluster(STORAGE_REFUSAL)
    _run(coordinator, timeout=20.0)
    assert coordinator.system_shutdown_flag, 'the run did not end after a storage refusal'
    assert learner.refused == 1  # not requeued: a retry would write to the same place
    refusal = coordinator.storage_refusal
    assert refusal is not None and 'iteration_0.safetensors' in refusal and 'was NOT saved' in refusal
    assert coordinator.shutdown_reason == refusal and coordinator.config_refusal is None
    coordinator.close()
    failed = coordinator.summary()['failed_tasks']
    assert [(f['kind'], f['storage_error']) for f in failed] == [('learner', True)]


CONFIG = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_config.py')


def _run_refused(tmp_path, policy_type: str, collectors: int) -> str:
    """``ding -m parallel`` with the test policy ``policy_type`` and ``collectors`` collector processes; asserts exit
    2 and no worker left; its stderr."""
    config = tmp_path / 'refused.py'
    config.write_text(
        f'base = {CONFIG!r}\n'
        "main_config = dict(exp_name='refused_run', "
        f'policy=dict(collect=dict(collector=dict(collector_num={collectors}))))\n'
        f"create_config = dict(policy=dict(type={policy_type!r}, import_names=['tests.helpers.refusing_policy']))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', str(config)],
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, stderr[-3000:]
    assert worker_pids(str(tmp_path)) == []
    return stderr


@pytest.mark.slow
def test_cli_run_ends_with_exit_2_when_the_learner_refuses_its_config(tmp_path):
    """Real workers through ``ding -m parallel``: the learner refuses its task for a config reason the config layer
    cannot see (its policy checks more); the run ends at once with that reason instead of retrying for ever."""
    stderr = _run_refused(tmp_path, 'refusing_dqn_command', collectors=1)  # the collectors play no part here
    last_lines = stderr.strip().splitlines()[-2:]
    assert any('was refused for its config' in line and REFUSAL in line for line in last_lines), stderr[-3000:]


@pytest.mark.slow
def test_cli_run_ends_with_exit_2_when_a_collector_refuses_its_config(tmp_path):
    """The same for a collector: its policy's collect mode refuses the config, so every collector would; the run
    ends with that reason (exit 2) instead of handing the task from collector to collector."""
    stderr = _run_refused(tmp_path, 'refusing_collect_dqn_command', collectors=2)
    last_lines = stderr.strip().splitlines()[-2:]
    assert any(
        'collector task' in line and 'was refused for its config' in line and COLLECT_REFUSAL in line
        for line in last_lines
    ), stderr[-3000:]
