"""SEED actor processes whose learner freezes: a real SIGSTOP of a real learner process. The one-host actor
(``actor_main``) and the remote one (``ding seed-actor``) both exit cleanly after ``actor_timeout`` seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ding.worker.seed.transport import RUN_SECRET_ENV, new_secret
from tests.helpers.processes import child_env
from tests.helpers.wait import wait_until

TIMEOUT = 2.0  # policy.seed.actor_timeout of both actors: long enough not to fire on a busy machine
# gymnasium's CartPole, not EnvPool's: the actors import it in a tenth of the time
ENV_JSON = '{"env_id": "CartPole-v1", "backend": "gymnasium"}'
CONFIG = f"""
main_config = dict(
    env=dict(env_id='CartPole-v1', backend='gymnasium'),
    policy=dict(seed=dict(env_per_actor=4, actor_timeout={TIMEOUT})),
)
create_config = dict(policy=dict(type='dqn'))
"""


def _start(argv: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *argv], env=env, text=True, stderr=subprocess.PIPE, **kwargs)


def test_both_kinds_of_actor_exit_cleanly_after_actor_timeout_when_the_learner_is_stopped(tmp_path):
    config = tmp_path / 'cfg.py'
    config.write_text(CONFIG)
    env = child_env(**{RUN_SECRET_ENV: new_secret()})
    socket_path = str(tmp_path / 's.sock')
    learner = _start(
        ['-m', 'tests.helpers.seed_learner', socket_path, str(TIMEOUT)],
        env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    actors: list[subprocess.Popen[str]] = []
    try:
        assert learner.stdout is not None
        _, _, address = learner.stdout.readline().split()
        local = ['-m', 'ding.worker.seed.actor_main', '--socket', socket_path, '--actor-id', '0', '--envs', '4']
        actors.append(_start([*local, '--env', ENV_JSON, '--timeout', str(TIMEOUT)], env))
        remote = ['--connect', address, '--actor-id', '1', '-c', str(config)]
        actors.append(_start(['-m', 'ding.entry.cli', 'seed-actor', *remote], env))
        assert learner.stdout.readline().strip() == 'served'  # both joined and were answered
        os.kill(learner.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            wait_until(lambda: all(a.poll() is not None for a in actors), 30, what='both actors exited')
            waited = time.monotonic() - stopped
        finally:
            os.kill(learner.pid, signal.SIGCONT)
        errors = [a.communicate()[1] for a in actors]
        assert [a.returncode for a in actors] == [0, 0], errors
        assert TIMEOUT * 0.9 <= waited < TIMEOUT + 20
        assert f'the learner sent nothing for {TIMEOUT:g} s (frozen or gone); exiting' in errors[0]
        assert 'lost the learner' in errors[1] and 'exiting' in errors[1]
    finally:
        for proc in [*actors, learner]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
