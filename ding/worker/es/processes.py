"""The local ES worker processes of ``ding -m es``: started with the run, stopped with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

from .worker_main import RUN_SECRET_ENV

WORKER_MODULE = 'ding.worker.es.worker_main'


class ESWorkerProcesses:
    """``worker_num`` processes of ``ding.worker.es.worker_main`` (``start_all(host, port)``). The token reaches
    them through their environment (``environ``, default this process's, plus the token), never their command
    line. A worker that exits is not restarted: the server goes on with the others (and with remote ones)."""

    def __init__(self, token: str, worker_num: int, environ: Mapping[str, str] | None = None) -> None:
        self.worker_num = worker_num
        self._environ = {**(os.environ if environ is None else environ), RUN_SECRET_ENV: token}
        self._procs: list[subprocess.Popen[bytes]] = []

    @staticmethod
    def command(host: str, port: int) -> list[str]:
        """A worker's command line (another host: ``ding es-worker --connect HOST:PORT --token T``)."""
        return [sys.executable, '-m', WORKER_MODULE, '--connect', f'{host}:{port}']

    def start_all(self, host: str, port: int) -> None:
        """Start the workers, connecting to the server at ``host:port``."""
        for _ in range(self.worker_num):
            self._procs.append(subprocess.Popen(self.command(host, port), env=self._environ, stdin=subprocess.DEVNULL))

    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]

    def exit_codes(self) -> list[int | None]:
        """Each process's exit code (None while it runs)."""
        return [proc.poll() for proc in self._procs]

    def stop(self, timeout: float = 10.0) -> list[int]:
        """SIGTERM every process, wait up to ``timeout`` seconds, SIGKILL what is left; the pids killed."""
        procs, self._procs = self._procs, []
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        killed = []
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                killed.append(proc.pid)
        return killed


__all__ = ['ESWorkerProcesses', 'WORKER_MODULE']
