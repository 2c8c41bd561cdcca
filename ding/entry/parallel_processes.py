"""The worker processes of a parallel run on this machine: launching one (or handing it to a warm
process), its readiness, restarts and stopping them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import IO, Any

from easydict import EasyDict

from ding.config.parallel_system import can_bind
from ding.interaction.base.auth import RUN_SECRET_ENV

from .parallel_prepare import child_env
from .parallel_worker import WARM_TORCH_THREADS

# Seconds between SIGTERM and SIGKILL when stopping workers.
STOP_GRACE = 5.0


class WorkerProcess:
    """One learner or collector process: launch, readiness (ready file), restart, stop."""

    def __init__(
        self,
        role: str,
        name: str,
        config_path: str,
        run_dir: str,
        log_dir: str,
        disable_flask_log: bool = True,
        secret: str | None = None,
    ) -> None:
        """``secret``: the run secret, handed to the process in its environment (never its arguments)."""
        self.role = role
        self.name = name
        self.config_path = config_path
        self.ready_file = os.path.join(run_dir, f'{name}.ready')
        self.log_path = os.path.join(log_dir, f'{name}.log')
        self.disable_flask_log = disable_flask_log
        self.proc: subprocess.Popen | None = None
        self.ready_info: dict[str, Any] | None = None
        self.restarts = 0
        self._secret = secret
        self._log_file: Any = None

    def launch(self, warm: subprocess.Popen | None = None) -> None:
        """Start the worker process, or hand the worker to ``warm`` (see ``WarmWorkers``) if given."""
        if os.path.exists(self.ready_file):
            os.remove(self.ready_file)
        self.ready_info = None
        if warm is not None:
            task = {
                'role': self.role,
                'name': self.name,
                'config': self.config_path,
                'ready_file': self.ready_file,
                'log': self.log_path,
                'enable_flask_log': not self.disable_flask_log,
            }
            try:
                _pipe_of(warm).write(json.dumps(task).encode() + b'\n')
                _pipe_of(warm).close()
                self.proc = warm
                return
            except OSError:  # it died meanwhile: start a fresh one
                warm.kill()
                warm.wait()
        args = ['--role', self.role, '--name', self.name, '--config', self.config_path, '--ready-file', self.ready_file]
        if not self.disable_flask_log:
            args.append('--enable-flask-log')
        if self._log_file is None:
            self._log_file = open(self.log_path, 'ab')
        self.proc = start_worker_process(
            args, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT, secret=self._secret
        )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def check_ready(self) -> bool:
        """True once the worker wrote its ready file (read into ``ready_info``)."""
        if self.ready_info is not None:
            return True
        try:
            with open(self.ready_file, encoding='utf-8') as f:
                info = json.load(f)
        except (OSError, ValueError):
            return False
        if info.get('pid') != self.pid:
            return False  # a file left by an earlier process of this worker
        self.ready_info = info
        return True

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, 'rb') as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 8000))
                lines = f.read().decode('utf-8', errors='replace').splitlines()
        except OSError:
            return ''
        return '\n'.join(lines[-n:])

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.terminate()
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if os.path.exists(self.ready_file):
            os.remove(self.ready_file)


def start_worker_process(args: list[str], secret: str | None = None, **popen: Any) -> subprocess.Popen:
    """``python -m ding.entry.parallel_worker ARGS``. The worker imports this very ding (and dizoo) even when it
    is not installed, shows no progress bar, and sizes torch's OpenMP pool itself (from its torch_threads,
    ``ding.entry.startup.limit_openmp_threads``). A session of its own: Ctrl-C in the terminal reaches the
    pipeline only, which stops workers in order. ``secret`` goes in ``$DING_RUN_SECRET`` (readable by this
    user only, unlike the arguments ``ps`` shows)."""
    env = child_env()
    env['DING_PROGRESS'] = '0'
    env.pop(RUN_SECRET_ENV, None)
    if secret is not None:
        env[RUN_SECRET_ENV] = secret
    return subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.parallel_worker'] + args, env=env, start_new_session=True, **popen
    )


def _pipe_of(proc: subprocess.Popen) -> IO[bytes]:
    """The stdin pipe of a warm process (started with ``stdin=PIPE``)."""
    if proc.stdin is None:
        raise OSError(f'process {proc.pid} has no stdin pipe')
    return proc.stdin


class WarmWorkers:
    """Worker processes started before the config is compiled (``parallel_worker --warm``): each imports
    torch at once, the first one then compiles the config (``answer``: the compile child's work, without a
    torch import of its own), and each is handed the worker it becomes. On two cores every worker of a
    CartPole run serves ~2 s sooner than when a compile child imports torch first and the workers after it.
    One that is not handed a worker is killed: it has only imported (and compiled), and written nothing
    else. ``DING_WARM_WORKERS=0`` turns this off."""

    def __init__(self, count: int, exp_dir: str, secret: str | None = None) -> None:
        if os.environ.get('DING_WARM_WORKERS', '1') == '0':
            count = 0
        # The first one may compile the config: its output reaches this terminal, as the compile child's does.
        self._procs: list[subprocess.Popen] = [
            start_worker_process(
                ['--warm', os.path.abspath(exp_dir)],
                secret=secret,
                stdin=subprocess.PIPE,
                stdout=None if i == 0 else subprocess.DEVNULL,
                stderr=None if i == 0 else subprocess.DEVNULL,
            )
            for i in range(count)
        ]

    def answer(self, request: str, answer: str) -> bool:
        """Have the first warm process compile the config (``ding.entry.parallel_prepare`` request and answer
        files); False if there is none, or it died before answering (then the compile child does it)."""
        proc = self._procs[0] if self._procs else None
        if proc is None or proc.poll() is not None:
            return False
        try:
            _pipe_of(proc).write(json.dumps({'prepare': [request, answer]}).encode() + b'\n')
            _pipe_of(proc).flush()
        except OSError:
            return False
        while not os.path.exists(answer):  # written atomically (temp file, rename)
            if proc.poll() is not None:
                return os.path.exists(answer)
            time.sleep(0.005)
        return True

    def take(self, entry: dict[str, Any]) -> subprocess.Popen | None:
        """A warm process for the worker of system entry ``entry`` (None: none left, or its torch threads
        differ from a warm process's, which torch fixes at import)."""
        if int(entry.get('torch_threads', 1)) != WARM_TORCH_THREADS:
            return None
        while self._procs:
            proc = self._procs.pop(0)
            if proc.poll() is None:
                return proc
        return None

    def discard(self) -> None:
        """Kill and reap every warm process not handed a worker."""
        for proc in self._procs:
            proc.kill()
        for proc in self._procs:
            proc.wait()
        self._procs = []


def expected_local_workers(main_cfg: EasyDict, system_cfg: EasyDict) -> int:
    """How many worker processes this machine will likely start (``learner_num + collector_num`` of the
    uncompiled config, less entries that name another host): the number of warm workers worth starting."""
    try:
        counts = {
            'learner': int(main_cfg.policy.learn.learner.get('learner_num', 1)),
            'collector': int(main_cfg.policy.collect.collector.get('collector_num', 1)),
        }
        for role in counts:
            entries = system_cfg.get(role) or {}
            counts[role] -= sum(
                1
                for entry in entries.values()
                if isinstance(entry, dict) and not is_local_host(entry.get('host') or '127.0.0.1')
            )
    except (AttributeError, TypeError, ValueError):  # a malformed config: compiling it says what is wrong
        return 0
    return max(0, sum(counts.values()))


def is_local_host(host: str) -> bool:
    """Whether a worker listening on ``host`` runs on this machine (the pipeline launches it)."""
    if host in ('127.0.0.1', 'localhost', '0.0.0.0', '', '::1'):
        return True
    return can_bind(host)


def stop_workers(workers: list[WorkerProcess], grace: float = STOP_GRACE) -> None:
    """SIGTERM every worker, wait up to ``grace`` seconds in total, SIGKILL the rest, reap all."""
    for w in workers:
        w.terminate()
    deadline = time.time() + grace
    for w in workers:
        w.wait(max(0.0, deadline - time.time()))
    for w in workers:
        if w.poll() is None:
            w.kill()
        w.wait(5.0)
        w.close_log()
