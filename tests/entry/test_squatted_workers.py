"""The parallel pipeline with a run secret from a file: the secret reaches the workers without being written
anywhere, and a worker squatted by another master (one that knows the secret) is reported at ERROR and replaced
on a new port while the run completes. Starts real worker processes, so marked slow."""

import glob
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from ding.entry.parallel_entry import parallel_pipeline
from ding.interaction import Master
from ding.interaction.base.auth import new_run_secret
from tests.helpers.interaction import FAST_MASTER
from tests.helpers.processes import worker_pids
from tests.helpers.toy_workers import toy_config
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow
EXP = 'toy_squat'


def _ready(name: str) -> dict | None:
    try:
        with open(os.path.join(EXP, 'run', f'{name}.ready')) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class _Squatter(threading.Thread):
    """A master that knows the secret and grabs ``port`` as soon as something serves there."""

    def __init__(self, secret: str, port: int) -> None:
        super().__init__(daemon=True)
        self.master = Master(port=0, secret=secret, **FAST_MASTER)
        self.port, self.done, self.connected, self.errors = port, threading.Event(), False, set()

    def run(self) -> None:
        while not self.done.is_set() and not self.connected:
            try:
                self.master.new_connection('victim', '127.0.0.1', self.port).connect()
                self.connected = True
            except Exception as exc:  # not serving yet
                self.errors.add(f'{type(exc).__name__}: {exc}'[:200])
                time.sleep(0.01)


def _logs() -> str:
    paths = glob.glob(f'{EXP}/log/**', recursive=True)
    return ''.join(Path(p).read_text(errors='replace') for p in paths if os.path.isfile(p))


def test_a_squatted_worker_is_replaced_and_the_secret_is_written_nowhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    secret = new_run_secret()
    secret_file = tmp_path / 'run_secret'
    secret_file.write_text(secret + '\n')
    secret_file.chmod(0o600)
    main, create, system = toy_config(EXP, stop_value=1e9, collector_extra=dict(calls_per_task=50, step_sleep=0.05))
    system.secret_file = str(secret_file)
    system.coordinator.reconnect_interval = 1.0  # the squatter, polling faster, gets there first
    stop, outcome = threading.Event(), {}
    run = threading.Thread(
        target=lambda: outcome.update(result=parallel_pipeline((main, create, system), seed=0, stop_event=stop)),
        daemon=True,
    )
    squatter = None
    run.start()
    try:
        assert wait_until(lambda: _ready('collector0') is not None, 120)
        first = _ready('collector0')
        squatter = _Squatter(secret, first['port'])
        squatter.master.start()
        time.sleep(1.0)  # mid-run
        os.kill(first['pid'], signal.SIGKILL)
        squatter.start()  # the restarted collector0 comes up on the same port: the squatter binds it first
        assert wait_until(lambda: squatter.connected, 120, what='the squatter to bind the restarted collector0')
        # the coordinator reports it and the pipeline replaces collector0 on a new port, which it then uses
        moved = lambda: (_ready('collector0') or {}).get('port') not in (None, first['port'])  # noqa: E731
        assert wait_until(moved, 120, what='collector0 to be replaced on a new port')
        new_port = _ready('collector0')['port']
        assert wait_until(lambda: f'collector0 (127.0.0.1:{new_port}) again' in _logs(), 60)
        assert run.is_alive() and 'result' not in outcome  # still running
    finally:
        stop.set()
        run.join(120)
        if squatter is not None:
            squatter.done.set()
            squatter.master.close()
    assert not run.is_alive(), 'the pipeline did not end'
    result = outcome['result']
    assert result.reason == 'stopped' and result.restarts['collector0'] == 2  # after the kill, after the squat
    errors = [line for line in _logs().splitlines() if 'held by someone else' in line]
    assert errors and all('ERROR' in line for line in errors) and 'SlaveSlaveAlreadyConnected' in errors[0]
    written = [p for p in glob.glob(f'{EXP}/**', recursive=True) if os.path.isfile(p)]
    assert written and not [p for p in written if secret.encode() in Path(p).read_bytes()]
    assert worker_pids(str(tmp_path)) == []
