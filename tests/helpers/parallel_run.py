"""A real ``ding -m parallel`` run in a subprocess, for the end-to-end tests of the run service in
parallel mode (tests/service/test_parallel_service.py, tests/entry/test_parallel_resume.py, ...)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import requests

from ding.entry.parallel_entry import parallel_pipeline
from tests.helpers.processes import ROOT, child_env
from tests.helpers.wait import wait_until

CONFIG = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_config.py')
EXP = 'svc_parallel'


def write_config(
    path: str,
    service: dict | None = None,
    stop_value: float = 195,
    collector: dict | None = None,
    learner_hook: dict | None = None,
) -> str:
    """A copy of the parallel CartPole DQN config with the given changes (the file is a real config file)."""
    lines = [
        f'exec(open({CONFIG!r}).read())',
        f'main_config.exp_name = {EXP!r}',
        f'main_config.env.stop_value = {stop_value!r}',
    ]
    if service is not None:
        lines.append(f'main_config.service = {service!r}')
    for key, value in (collector or {}).items():
        lines.append(f'main_config.policy.collect.collector[{key!r}] = {value!r}')
    if learner_hook:
        lines.append(f'main_config.policy.learn.learner.setdefault("hook", {{}}).update({learner_hook!r})')
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')
    return path


class ParallelRun:
    """``ding -m parallel -c CFG`` started in ``cwd``; ``stop()`` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, cwd: str, config: str, *extra: str) -> None:
        self.cwd = cwd
        self.exp_dir = os.path.join(cwd, EXP)
        env = child_env(OMP_NUM_THREADS='1')
        self.log_path = os.path.join(cwd, 'pipeline.log')
        self._log = open(self.log_path, 'wb')
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', config, '-s', '0', *extra],
            cwd=cwd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # killpg-able

    def output(self) -> str:
        with open(self.log_path, encoding='utf-8', errors='replace') as f:
            return f.read()

    def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """``wait_until`` on this run: fails as soon as the run exits, showing the end of its output."""
        try:
            return wait_until(predicate, timeout, interval=0.2, what=what, proc=self.proc)
        except AssertionError as failure:
            raise AssertionError(f'{failure}:\n{self.output()[-3000:]}') from None

    def run_info(self, name: str = 'run.json') -> dict[str, Any] | None:
        try:
            with open(os.path.join(self.exp_dir, name), encoding='utf-8') as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


class Service:
    """HTTP calls to one process's run service, address, token and (over TLS) CA file from its run file."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.url = info['url']
        self.headers = {'Authorization': f'Bearer {info["token"]}'}
        self.verify: str | bool = info.get('ca_file') or True

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=30, verify=self.verify)

    def post(self, path: str, body: dict | None = None) -> requests.Response:
        return requests.post(self.url + path, json=body or {}, headers=self.headers, timeout=60, verify=self.verify)

    def status(self) -> dict[str, Any]:
        r = self.get('/run/status')
        assert r.status_code == 200, r.text
        return r.json()['data']


def checkpoint_iterations(ckpt_dir: str) -> list:
    """Iterations of the checkpoints in ``ckpt_dir`` (from their file names)."""
    if not os.path.isdir(ckpt_dir):
        return []
    its = []
    for name in os.listdir(ckpt_dir):
        m = re.fullmatch(r'iteration_(\d+)\.safetensors', name)
        if m:
            its.append(int(m.group(1)))
    return sorted(its)


class PipelineThread(threading.Thread):
    """``parallel_pipeline`` in a thread of the test process, stopped through its ``stop_event`` whatever happens
    in the test: ``with PipelineThread(cfg) as run: ...`` then ``run.result``."""

    def __init__(self, cfg: Any, seed: int = 0) -> None:
        super().__init__(daemon=True)
        self.cfg, self.seed, self.stop = cfg, seed, threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = parallel_pipeline(self.cfg, seed=self.seed, stop_event=self.stop)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def __enter__(self) -> PipelineThread:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None:
            self.stop.set()
        self.join(180)
        assert not self.is_alive(), 'the pipeline did not end'
        if self.error is not None:
            raise self.error


def ready_pid(exp_dir: str, name: str) -> int | None:
    """The pid a worker wrote in its ready file once serving (None before)."""
    try:
        with open(os.path.join(exp_dir, 'run', f'{name}.ready')) as f:
            return int(json.load(f)['pid'])
    except (OSError, ValueError, KeyError, TypeError):
        return None
