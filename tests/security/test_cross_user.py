"""Another local user against a live ``ding -m parallel`` run: as root, the probes run as uid 65534 (``setpriv``) with
curl and shell tools only (python is not usable by that user here). That user cannot read the run files or the
secret file, finds no token or secret in anything it can read (logs, config dumps, process arguments), cannot write
the run's directories, is refused by the workers' ``/connect`` and by the run service, and the run goes on."""

import os
import shutil
import subprocess
import tempfile
import time

import pytest

from ding.interaction.base.auth import new_run_secret
from tests.helpers.parallel_run import ParallelRun, Service, write_config

NOBODY = 65534
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, 'geteuid') or os.geteuid() != 0, reason='needs root to switch to uid 65534'),
    pytest.mark.skipif(shutil.which('setpriv') is None, reason='needs setpriv (util-linux) to switch users'),
    pytest.mark.skipif(shutil.which('curl') is None, reason='the other user probes with curl'),
]


def as_other_user(script: str, cwd: str) -> subprocess.CompletedProcess:
    """``sh -c script`` as uid/gid 65534 without supplementary groups, with a bare environment."""
    command = ['setpriv', f'--reuid={NOBODY}', f'--regid={NOBODY}', '--clear-groups', 'sh', '-c', script]
    env = {'PATH': '/usr/local/bin:/usr/bin:/bin', 'HOME': '/nonexistent', 'LC_ALL': 'C'}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=120)


def http_code(method: str, url: str, cwd: str, *headers: str) -> str:
    """The status code curl gets as the other user (a JSON body of ``{}``)."""
    args = ' '.join(f"-H '{h}'" for h in headers)
    out = as_other_user(f"curl -s -o /dev/null -w '%{{http_code}}' -X {method} {args} -d '{{}}' '{url}'", cwd)
    return out.stdout.decode()


class LiveRun:
    def __init__(self, run: ParallelRun, secret: str, secret_file: str, services: dict, workers: dict) -> None:
        self.run, self.cwd, self.secret, self.secret_file = run, run.cwd, secret, secret_file
        self.services, self.workers = services, workers  # run files by name; ready files by worker

    @property
    def tokens(self) -> list[str]:
        return [info['token'] for info in self.services.values()]


@pytest.fixture(scope='module')
def live_run():
    """A run in a directory other users may enter (as a home directory on a shared host usually is), with its
    secret in a 0600 file and the run service on (tokens generated, in 0600 run files)."""
    cwd = tempfile.mkdtemp(prefix='ding-cross-user-', dir='/tmp')
    os.chmod(cwd, 0o755)
    run = None
    try:
        secret, secret_file = new_run_secret(), os.path.join(cwd, 'run.secret')
        fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, 'w') as f:
            f.write(secret + '\n')
        cfg = write_config(
            os.path.join(cwd, 'cfg.py'),
            service=dict(enable=True),
            stop_value=100000,
            learner_hook=dict(save_ckpt_after_iter=20),
            collector=dict(collector_num=1),  # the probes go to learner0 and collector0
        )
        with open(cfg, 'a', encoding='utf-8') as f:
            f.write(f'system_config.secret_file = {secret_file!r}\n')
        run = ParallelRun(cwd, cfg)
        services = {
            name: run.wait_for(lambda n=name: run.run_info(n), 120, f'the run file {name}')
            for name in ('run.json', 'run_learner0.json')
        }
        workers = {
            name: run.wait_for(lambda n=name: run.run_info(os.path.join('run', f'{n}.ready')), 60, f'{name} to serve')
            for name in ('learner0', 'collector0')
        }
        live = LiveRun(run, secret, secret_file, services, workers)
        run.wait_for(lambda: Service(services['run.json']).status()['iteration'] > 10, 120, 'training to start')
        ckpt_dir = os.path.join(run.exp_dir, 'ckpt_learner0')
        run.wait_for(lambda: os.path.isdir(ckpt_dir) and os.listdir(ckpt_dir), 120, 'a checkpoint')
        yield live
    finally:
        if run is not None:
            run.stop()
        shutil.rmtree(cwd, ignore_errors=True)


def test_the_other_user_cannot_read_the_run_files_or_the_secret(live_run):
    for path in ('svc_parallel/run.json', 'svc_parallel/run_learner0.json', 'run.secret'):
        out = as_other_user(f'cat {path}', live_run.cwd)
        assert out.returncode != 0 and b'Permission denied' in out.stderr, path
        assert out.stdout == b''
    assert os.stat(live_run.secret_file).st_mode & 0o777 == 0o600


def test_nothing_the_other_user_can_read_holds_a_token_or_the_secret(live_run):
    pids = [live_run.run.proc.pid] + [info['pid'] for info in live_run.workers.values()]
    # Every file of the run it can read (logs, parallel_config.json, total_config.py, ...) and every process's
    # arguments; a process's environment (where a worker got the secret) it cannot read at all.
    script = 'find . -type f -readable -exec cat {} +; ' + ' '.join(f'cat /proc/{p}/cmdline;' for p in pids)
    seen = as_other_user(script, live_run.cwd).stdout
    assert b'svc_parallel' in seen and b'learner0' in seen  # it did read the logs and config dumps
    for value in [live_run.secret] + live_run.tokens:
        assert value.encode() not in seen
    for pid in pids:
        out = as_other_user(f'cat /proc/{pid}/environ', live_run.cwd)
        assert out.returncode != 0 and out.stdout == b'', pid


def test_the_other_user_cannot_write_the_runs_directories(live_run):
    for directory in ('policy', 'ckpt_learner0', 'data', 'log', '.'):
        path = os.path.join('svc_parallel', directory)
        out = as_other_user(f'touch {path}/planted && echo planted', live_run.cwd)
        assert out.returncode != 0 and b'Permission denied' in out.stderr, path
        assert not os.path.exists(os.path.join(live_run.cwd, path, 'planted'))
    policy_files = os.listdir(os.path.join(live_run.cwd, 'svc_parallel', 'policy'))
    for name in policy_files:
        out = as_other_user(f'echo x >> svc_parallel/policy/{name}', live_run.cwd)
        assert out.returncode != 0, name


def test_the_other_user_is_refused_by_the_workers_and_the_run_service(live_run):
    fake_proof = 'Authorization: Ding-HMAC ' + '0' * 32 + ':' + str(int(time.time())) + ':' + '0' * 64
    for name, info in live_run.workers.items():
        url = f'http://127.0.0.1:{info["port"]}/connect'
        assert http_code('POST', url, live_run.cwd, 'Channel: 0', 'Token: t') == '401', name
        assert http_code('POST', url, live_run.cwd, 'Channel: 0', 'Token: t', fake_proof) == '403', name
    for name, info in live_run.services.items():
        for route in ('/run/pause', '/run/tune', '/run/terminate'):
            assert http_code('POST', info['url'] + route, live_run.cwd) == '401', (name, route)
            wrong = 'Authorization: Bearer ' + '1' * 32
            assert http_code('POST', info['url'] + route, live_run.cwd, wrong) == '403', (name, route)
        status = as_other_user(f"curl -s '{info['url']}/run/status'", live_run.cwd).stdout
        assert b'"state": "running"' in status.replace(b'":"', b'": "')  # readable, without a token in it
        assert all(token.encode() not in status for token in live_run.tokens)


def test_the_run_goes_on_unaffected(live_run):
    coordinator = Service(live_run.services['run.json'])
    before = coordinator.status()['iteration']
    live_run.run.wait_for(lambda: coordinator.status()['iteration'] > before + 10, 120, 'training to go on')
    assert coordinator.status()['state'] == 'running'
    assert live_run.run.proc.poll() is None
