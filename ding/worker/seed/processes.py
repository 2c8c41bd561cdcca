"""The learner's SEED actor processes: starting them, restarting one that died, stopping them all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from ding.utils.jsonable import to_jsonable

from .transport import RUN_SECRET_ENV

ACTOR_MODULE = 'ding.worker.seed.actor_main'


class ActorProcesses:
    """``actor_num`` processes of ``ding.worker.seed.actor_main``, each with ``env_per_actor`` envs of
    ``env_cfg``; actor ``i`` seeds its envs from ``seed + i * env_per_actor`` and exits when the learner is silent
    ``actor_timeout`` seconds. The secret reaches them through
    their environment (``environ``, default this process's, plus the secret), never their command line."""

    def __init__(
        self,
        socket_path: str,
        secret: str,
        env_cfg: Mapping[str, Any],
        actor_num: int,
        env_per_actor: int,
        seed: int,
        max_restarts: int = 0,
        environ: Mapping[str, str] | None = None,
        actor_timeout: float = 60.0,
    ) -> None:
        self.socket_path = socket_path
        self.actor_num = actor_num
        self.env_per_actor = env_per_actor
        self.seed = seed
        self.max_restarts = max_restarts
        self.actor_timeout = actor_timeout  # an actor whose learner is silent this long exits
        self.restarts = 0
        self.exit_codes: list[tuple[int, int]] = []  # (actor id, code) of every process that ended on its own
        self._env_json = json.dumps(to_jsonable(dict(env_cfg)))
        self._environ = {**(os.environ if environ is None else environ), RUN_SECRET_ENV: secret}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    def command(self, actor_id: int) -> list[str]:
        """The command line of actor ``actor_id`` (to start one by hand: set ``$DING_RUN_SECRET`` too)."""
        return [
            sys.executable,
            '-m',
            ACTOR_MODULE,
            '--socket',
            self.socket_path,
            '--actor-id',
            str(actor_id),
            '--envs',
            str(self.env_per_actor),
            '--seed',
            str(self.seed + actor_id * self.env_per_actor),
            '--env',
            self._env_json,
            '--timeout',
            str(self.actor_timeout),
        ]

    def start(self, actor_id: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(self.command(actor_id), env=self._environ, stdin=subprocess.DEVNULL)
        self._procs[actor_id] = proc
        return proc

    def start_all(self) -> None:
        for actor_id in range(self.actor_num):
            self.start(actor_id)

    def pid(self, actor_id: int) -> int | None:
        proc = self._procs.get(actor_id)
        return None if proc is None else proc.pid

    def exit_code(self, actor_id: int) -> int | None:
        """The exit code of actor ``actor_id``'s current process; None while it runs."""
        proc = self._procs.get(actor_id)
        return None if proc is None else proc.poll()

    def restart_dead(self) -> list[int]:
        """Start again each actor whose process ended, while restarts are left; the ids restarted. Raises
        ``RuntimeError`` when an actor died and no restart is left."""
        restarted = []
        for actor_id, proc in list(self._procs.items()):
            code = proc.poll()
            if code is None:
                continue
            self.exit_codes.append((actor_id, code))
            if self.restarts >= self.max_restarts:
                del self._procs[actor_id]
                raise RuntimeError(
                    f'seed actor {actor_id} exited with code {code} and no restart is left '
                    f'(policy.seed.max_actor_restarts = {self.max_restarts})'
                )
            self.restarts += 1
            self.start(actor_id)
            restarted.append(actor_id)
        return restarted

    def stop(self, timeout: float = 10.0) -> list[int]:
        """SIGTERM every process, wait up to ``timeout`` seconds, SIGKILL what is left; the ids killed."""
        procs, self._procs = self._procs, {}
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        killed = []
        deadline = time.monotonic() + timeout
        for actor_id, proc in procs.items():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                killed.append(actor_id)
        return killed


__all__ = ['ACTOR_MODULE', 'ActorProcesses']
