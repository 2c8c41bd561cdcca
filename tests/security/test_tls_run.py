"""A real ``ding -m parallel`` run with ``system.tls``: the coordinator and the learner and collector processes talk
HTTPS with certificates made by ``openssl`` (tests/helpers/tls.py), the run trains, a plain-HTTP client or a
client trusting another CA gets nothing from a worker, and the run service answers ``ding ctl`` over HTTPS."""

import json
import os
import re
import socket
import time

import pytest
import requests

from ding.entry.cli import main as ding_main
from ding.entry.ctl import RunServiceClient
from tests.helpers.parallel_run import ParallelRun, write_config
from tests.helpers.tls import make_pki

pytestmark = pytest.mark.slow


def _worker_port(run: ParallelRun, name: str) -> int | None:
    try:
        with open(os.path.join(run.exp_dir, 'run', f'{name}.ready'), encoding='utf-8') as f:
            return int(json.load(f)['port'])
    except (OSError, ValueError, KeyError):
        return None


def _coordinator_port(run: ParallelRun) -> int:
    with open(os.path.join(run.exp_dir, 'parallel_config.json'), encoding='utf-8') as f:
        return int(json.load(f)['system']['coordinator']['port'])


def test_a_parallel_run_trains_over_tls_and_refuses_plain_and_foreign_clients(tmp_path):
    pki = make_pki(str(tmp_path))
    cfg = write_config(str(tmp_path / 'cfg.py'), stop_value=100000, service=dict(enable=True))
    with open(cfg, 'a', encoding='utf-8') as f:
        f.write(f'system_config.tls = {pki.tls_section()!r}\n')
        f.write('system_config.http = dict(read_timeout=2.0)\n')  # shows that system.http reaches every server
    run = ParallelRun(str(tmp_path), cfg)
    try:
        port = run.wait_for(lambda: _worker_port(run, 'learner0'), 120, 'the learner to serve')
        with requests.Session() as session:
            session.trust_env = False
            assert session.get(f'https://127.0.0.1:{port}/ping', verify=pki.ca_file, timeout=10).status_code == 200
            with pytest.raises(requests.ConnectionError):
                session.get(f'http://127.0.0.1:{port}/ping', timeout=10)
            with pytest.raises(requests.exceptions.SSLError):
                session.get(f'https://127.0.0.1:{port}/ping', verify=pki.other_ca_file, timeout=10)
            # the coordinator's run service: HTTPS, its CA named in run.json, so ding ctl needs nothing more
            info = run.wait_for(run.run_info, 60, 'the run file')
            assert info['url'].startswith('https://') and info['ca_file'] == pki.ca_file
            with pytest.raises(requests.ConnectionError):
                session.get(f'http://{info["address"]}/run/status', timeout=10)
        client = RunServiceClient(info['url'], info['token'], ca_file=info['ca_file'])
        run.wait_for(lambda: client.status()['iteration'] >= 40, 120, 'the run to train over TLS')
        assert ding_main(['ctl', 'status', '--exp-dir', run.exp_dir]) == 0
        assert ding_main(['ctl', 'status', '--address', info['url'], '--ca-file', pki.other_ca_file]) == 1
        # a client that connects and says nothing is dropped after system.http.read_timeout, by the learner and by
        # the coordinator alike (both connected at once: one wait)
        silent = [socket.create_connection(('127.0.0.1', p), timeout=10) for p in (port, _coordinator_port(run))]
        started = time.monotonic()
        try:
            for connection in silent:
                assert connection.recv(1) == b''
                assert 1.5 < time.monotonic() - started < 6.0
        finally:
            for connection in silent:
                connection.close()
        assert ding_main(['ctl', 'terminate', '--exp-dir', run.exp_dir]) == 0
        assert run.proc.wait(120) == 0, run.output()[-3000:]
    finally:
        run.stop()
    coordinator_log = os.path.join(run.exp_dir, 'log', 'coordinator', 'coordinator_logger.txt')
    assert 'master listening on https://127.0.0.1:' in open(coordinator_log, encoding='utf-8').read()
    trained = re.search(r'\[ding\] svc_parallel: .* train iters (\d+)', run.output())
    assert trained is not None and int(trained.group(1)) >= 40, run.output()[-2000:]
