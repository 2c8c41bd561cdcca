"""Real ``ding replay-server`` / ``ding learner`` / ``ding replay-feed`` processes on 127.0.0.1 for the replay
service's end-to-end tests and benchmark: started with the run secret set, their output collected line by
line, all stopped by ``stop_all`` (SIGKILL after a grace period)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from tests.helpers.processes import child_env

SECRET = 'replay-e2e-secret-0123456789abcdef'


class DingProcess:
    """``python -m ding.entry.cli ARGS`` in ``cwd``; ``lines`` fills as it prints (stdout and stderr)."""

    def __init__(self, args: list[str], cwd: str) -> None:
        env = child_env(OMP_NUM_THREADS='1', DING_RUN_SECRET=SECRET)
        for name in ('DING_PROGRESS', 'DING_QUIET', 'DING_CONSOLE'):  # the state changes are console lines
            env.pop(name, None)
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'ding.entry.cli', *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.extend(piece for piece in line.split('\r') if piece.strip())

    def text(self) -> str:
        return '\n'.join(self.lines)

    def wait_for(self, needle: str, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if needle in self.text():
                return True
            if self.proc.poll() is not None:
                self._reader.join(timeout=2)
                return needle in self.text()
            time.sleep(0.05)
        return False

    def stop(self, grace: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=2)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def replay_server(cwd: str, port: int, *extra: str) -> DingProcess:
    server = DingProcess(['replay-server', '--port', str(port), *extra], cwd)
    if not server.wait_for('replay server listening', 30):
        server.stop()
        raise RuntimeError(f'the replay server did not start: {server.text()[-2000:]}')
    return server


def stop_all(processes: list[DingProcess]) -> None:
    for process in processes:
        process.stop()


def write_config(path: str, stop_value: float) -> str:
    """CartPole DQN with ``stop_value``, as a config file of its own."""
    with open(path, 'w') as f:
        f.write(
            'import copy\n'
            'from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config\n'
            'main_config = copy.deepcopy(main_config)\n'
            f'main_config.env.stop_value = {stop_value}\n'
        )
    return os.fspath(path)
