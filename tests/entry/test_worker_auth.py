"""A real parallel worker process with a run secret: a master must prove the secret on /connect before
anything is read, a bound worker refuses other masters, and a worker started without a secret does not serve."""

import json
import subprocess
import sys

import pytest
import requests

from ding.config.parallel import compile_config_parallel
from ding.entry.parallel_entry import WorkerProcess, stop_workers
from ding.entry.parallel_worker import EXIT_CONFIG_ERROR
from ding.interaction import Master, SlaveErrorCode
from ding.interaction.base.auth import new_run_secret
from ding.interaction.exception import SlaveSlaveAlreadyConnected
from tests.helpers.processes import child_env
from tests.helpers.toy_workers import toy_config
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow
SECRET = new_run_secret()
BIG_BODY = b'{"master": {"address": "http://127.0.0.1:1"}, "data": {"x": "' + b'a' * (20 * 1024 * 1024) + b'"}}'


def _rss_kib(pid: int) -> int:
    with open(f'/proc/{pid}/status') as f:
        return next(int(line.split()[1]) for line in f if line.startswith('VmRSS:'))


@pytest.fixture(scope='module')
def collector(tmp_path_factory):
    """collector0 of a toy run, in its own process with the run secret, serving on 127.0.0.1; shared by the tests
    below (each leaves it unbound: its masters close)."""
    tmp_path = tmp_path_factory.mktemp('worker_auth')
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)  # the worker writes its run directory in the current one
        cfg = compile_config_parallel(*toy_config('toy_auth', collector_num=1), seed=0)
        config_json = tmp_path / 'parallel_config.json'
        config_json.write_text(json.dumps(cfg))
        (tmp_path / 'run').mkdir()
        worker = WorkerProcess('collector', 'collector0', str(config_json), 'run', '.', secret=SECRET)
        try:
            worker.launch()
            wait_until(worker.check_ready, 120, what='collector0 to serve')
            yield worker
        finally:
            stop_workers([worker])


def _post_connect(port: int, headers: dict, body: bytes) -> requests.Response:
    with requests.Session() as session:
        session.trust_env = False
        return session.post(f'http://127.0.0.1:{port}/connect', data=body, headers=headers, timeout=30)


def test_connect_without_the_secret_is_refused_unread(collector):
    port = collector.ready_info['port']
    assert SECRET not in open(collector.log_path).read()  # nor in its arguments: it came in its environment
    missing = _post_connect(port, {'Channel': '0', 'Token': 't'}, b'{}')
    assert missing.status_code == 401 and missing.json()['code'] == SlaveErrorCode.MASTER_SECRET_NOT_GIVEN
    before = 0
    for i in range(23):  # 460 MB of unauthenticated bodies: never parsed, so the worker does not grow
        if i == 3:  # after the first requests (threads, first-use allocations of the HTTP stack)
            before = _rss_kib(collector.pid)
        try:
            wrong = _post_connect(port, {'Channel': '0', 'Token': 't', 'Authorization': 'Bearer x'}, BIG_BODY)
            assert wrong.status_code in (403, 413)  # refused unread: by the wrong proof or by the body's size
        except requests.ConnectionError:
            pass  # the server answered and closed before the whole body was sent: refused all the same
    grown = _rss_kib(collector.pid) - before
    assert grown < 8 * 1024, f'the worker grew by {grown} KiB'
    wrong = _post_connect(port, {'Channel': '0', 'Token': 't', 'Authorization': 'Bearer x'}, b'{}')
    assert wrong.status_code == 403 and wrong.json()['code'] == SlaveErrorCode.MASTER_SECRET_NOT_MATCH
    # no effect: the rightful master connects
    master = Master(port=0, secret=SECRET)
    master.start()
    try:
        master.new_connection('collector0', '127.0.0.1', port).connect()
        assert 'collector0' in master
    finally:
        master.close()


def test_a_bound_worker_refuses_a_second_master_with_the_secret(collector):
    port = collector.ready_info['port']
    first, second = Master(port=0, secret=SECRET), Master(port=0, secret=SECRET)
    first.start()
    second.start()
    try:
        first.new_connection('collector0', '127.0.0.1', port).connect()
        with pytest.raises(SlaveSlaveAlreadyConnected) as info:
            second.new_connection('collector0', '127.0.0.1', port).connect()
        assert info.value.status_code == 409 and 'collector0' in first
    finally:
        first.close()
        second.close()


def test_a_worker_without_a_secret_does_not_serve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = compile_config_parallel(*toy_config('toy_nosecret', collector_num=1), seed=0)
    (tmp_path / 'cfg.json').write_text(json.dumps(cfg))
    env = child_env()
    env.pop('DING_RUN_SECRET', None)
    args = ['--role', 'collector', '--name', 'collector0', '--config', 'cfg.json']
    done = subprocess.run(
        [sys.executable, '-m', 'ding.entry.parallel_worker', *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_CONFIG_ERROR
    assert 'no run secret' in done.stderr and 'DING_RUN_SECRET' in done.stderr
