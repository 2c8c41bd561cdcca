"""The run service in parallel mode, end to end: a real ``ding -m parallel`` run (coordinator, learner and
collector processes on 127.0.0.1) paused, tuned, resumed, scraped and terminated. The run is over TLS (``system.tls``,
certificates made by ``openssl``: tests/helpers/tls.py): every server speaks HTTPS, a plain-HTTP client or one
trusting another CA gets nothing, and ``ding ctl`` finds the CA in run.json. (One run for both: each start of a
parallel CartPole run costs tens of seconds. Collectors that take their weights over HTTP solve CartPole in
tests/entry/test_e2e_cartpole.py; the run service over plain HTTP serves tests/entry/test_parallel_resume.py and
tests/security/test_cross_user.py.)"""

import json
import os
import socket
import stat
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from ding.config.errors import ConfigError
from ding.entry.cli import main as ding_main
from tests.helpers.parallel_run import EXP, ParallelRun, Service, checkpoint_iterations, write_config
from tests.helpers.tls import Pki, make_pki

TOKEN = 'configured-token-5e1f0c'
SERVICE = dict(enable=True, weights_freq=20, token=TOKEN)


def metrics_of(service: Service) -> dict:
    r = service.get('/metrics')
    assert r.status_code == 200
    return {s.name: s.value for fam in text_string_to_metric_families(r.text) for s in fam.samples}


@pytest.fixture(scope='module')
def pki(tmp_path_factory) -> Pki:
    return make_pki(str(tmp_path_factory.mktemp('pki')))


@pytest.fixture(scope='module')
def live_run(tmp_path_factory, pki):
    """One parallel run over TLS that does not end by itself (stop value out of reach), shared by the tests below
    in order; the last one terminates it."""
    cwd = str(tmp_path_factory.mktemp('parallel_service'))
    cfg = write_config(
        os.path.join(cwd, 'cfg.py'),
        service=SERVICE,
        stop_value=100000,
        learner_hook=dict(save_ckpt_after_iter=100000),
        collector=dict(collector_num=1),  # one collector process feeds the learner enough to show training
    )
    with open(cfg, 'a', encoding='utf-8') as f:
        f.write(f'system_config.tls = {pki.tls_section()!r}\n')
        f.write('system_config.http = dict(read_timeout=2.0)\n')  # shows that system.http reaches every server
    run = ParallelRun(cwd, cfg)
    try:
        info = run.wait_for(lambda: run.run_info(), 60, 'the coordinator run.json')
        learner_info = run.wait_for(lambda: run.run_info('run_learner0.json'), 60, "the learner's run file")
        coordinator, learner = Service(info), Service(learner_info)
        run.wait_for(lambda: coordinator.status()['iteration'] > 20, 60, 'training to start')
        yield run, coordinator, learner
    finally:
        run.stop()


@pytest.mark.slow
def test_coordinator_run_file_status_and_metrics(live_run):
    run, coordinator, learner = live_run
    info = run.run_info()
    assert info['instance'] == 'coordinator' and info['exp_name'] == EXP
    status = coordinator.status()
    assert status['state'] == 'running'
    assert {'learning_rate', 'eps.start', 'eps.end', 'eps.decay'} <= set(status['hyperparameters'])
    assert coordinator.get('/healthz').status_code == 200
    assert learner.get('/healthz').status_code == 200
    c, lm = metrics_of(coordinator), metrics_of(learner)
    assert c['learner_iteration'] > 0 and c['learner_sgd_steps_total'] > 0
    assert lm['learner_iteration'] > 0 and lm['learner_sgd_steps_total'] > 0
    assert 'learner_total_loss' in lm and lm['learner_weights_version'] >= 0
    # the learner serves its weights; the coordinator does not
    assert learner.get('/weights/meta').status_code == 200
    assert coordinator.get('/weights/meta').status_code == 404


def _worker_port(run: ParallelRun, name: str) -> int:
    with open(os.path.join(run.exp_dir, 'run', f'{name}.ready'), encoding='utf-8') as f:
        return int(json.load(f)['port'])


@pytest.mark.slow
def test_every_server_speaks_tls_and_refuses_plain_and_foreign_clients(live_run, pki):
    run, coordinator, learner = live_run
    port = _worker_port(run, 'learner0')
    info = run.run_info()
    with requests.Session() as session:
        session.trust_env = False
        assert session.get(f'https://127.0.0.1:{port}/ping', verify=pki.ca_file, timeout=10).status_code == 200
        with pytest.raises(requests.ConnectionError):
            session.get(f'http://127.0.0.1:{port}/ping', timeout=10)
        with pytest.raises(requests.exceptions.SSLError):
            session.get(f'https://127.0.0.1:{port}/ping', verify=pki.other_ca_file, timeout=10)
        # the coordinator's run service: HTTPS, its CA named in run.json, so ding ctl needs nothing more
        assert info['url'].startswith('https://') and info['ca_file'] == pki.ca_file
        with pytest.raises(requests.ConnectionError):
            session.get(f'http://{info["address"]}/run/status', timeout=10)
    assert learner.url.startswith('https://')
    assert ding_main(['ctl', 'status', '--exp-dir', run.exp_dir]) == 0
    assert ding_main(['ctl', 'status', '--address', info['url'], '--ca-file', pki.other_ca_file]) == 1
    coordinator_log = os.path.join(run.exp_dir, 'log', 'coordinator', 'coordinator_logger.txt')
    assert 'master listening on https://127.0.0.1:' in open(coordinator_log, encoding='utf-8').read()


@pytest.mark.slow
def test_a_silent_client_is_dropped_after_the_read_timeout(live_run):
    """By the learner and by the coordinator alike (both connected at once: one wait)."""
    run, coordinator, learner = live_run
    with open(os.path.join(run.exp_dir, 'parallel_config.json'), encoding='utf-8') as f:
        coordinator_port = int(json.load(f)['system']['coordinator']['port'])
    ports = (_worker_port(run, 'learner0'), coordinator_port)
    silent = [socket.create_connection(('127.0.0.1', p), timeout=10) for p in ports]
    started = time.monotonic()
    try:
        for connection in silent:
            assert connection.recv(1) == b''
            assert 1.5 < time.monotonic() - started < 6.0
    finally:
        for connection in silent:
            connection.close()


@pytest.mark.slow
def test_pause_tune_resume(live_run):
    run, coordinator, learner = live_run
    r = coordinator.post('/run/pause', {'wait': 20})
    assert r.status_code == 200 and r.json()['data']['state'] == 'paused', r.text
    # The batches in flight train first: up to two learn tasks (2 x comm_batches) and the loader's queue.
    it, deadline = learner.status()['iteration'], time.time() + 30
    while time.time() < deadline:
        time.sleep(1.0)
        it, before = learner.status()['iteration'], it
        if it == before:
            break
    time.sleep(2.0)
    assert learner.status()['iteration'] == it, 'the learner trained while the run was paused'
    status = coordinator.status()
    assert status['state'] == 'paused' and status['heartbeat_age_seconds'] < 5.0

    bad = coordinator.post('/run/tune', {'changes': {'learning_rate': 5}})
    assert 400 <= bad.status_code < 500
    assert 'learning_rate' in bad.text and '(0, 1]' in bad.text
    ok = coordinator.post('/run/tune', {'changes': {'learning_rate': 0.0005, 'eps.end': 0.05}, 'wait': 10})
    assert ok.status_code == 200, ok.text
    assert ok.json()['data']['changes']['learning_rate']['new'] == 0.0005

    assert coordinator.post('/run/resume').status_code == 200
    # The learning rate travels with the next learn task and is applied between two learner iterations.
    run.wait_for(
        lambda: learner.status()['hyperparameters'].get('learning_rate') == 0.0005,
        30,
        'the learner to apply the tuned learning rate',
    )
    run.wait_for(lambda: learner.status()['iteration'] > it + 10, 30, 'training to go on after resume')
    assert coordinator.status()['hyperparameters']['eps.end'] == 0.05


def hyperparameter_gauge(service: Service, key: str) -> float:
    r = service.get('/metrics')
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            if s.name == 'learner_hyperparameter' and s.labels.get('key') == key:
                return s.value
    raise AssertionError(f'no learner_hyperparameter{{key="{key}"}} in /metrics')


@pytest.mark.slow
def test_tune_batch_size_and_pacing_refuses_what_parallel_dqn_lacks(live_run):
    run, coordinator, learner = live_run
    status = coordinator.status()
    assert status['hyperparameters']['batch_size'] == 64
    assert status['hyperparameters']['max_samples_per_iter'] == 4
    # DQN has no loss weights; update_per_collect has no meaning in parallel mode (pacing plays its role)
    for key in ('entropy_weight', 'value_weight', 'update_per_collect'):
        bad = coordinator.post('/run/tune', {'changes': {key: 1}})
        assert 400 <= bad.status_code < 500 and key in bad.text, bad.text
    for key, value, bound in (('batch_size', 0, '[1, 65536]'), ('max_samples_per_iter', 0, '(0, 1000000]')):
        bad = coordinator.post('/run/tune', {'changes': {key: value}})
        assert 400 <= bad.status_code < 500 and key in bad.text and bound in bad.text, bad.text
    bad = coordinator.post('/run/tune', {'changes': {'batch_size': 30000}})
    assert 400 <= bad.status_code < 500 and 'replay_buffer_size = 20000' in bad.text, bad.text
    assert coordinator.status()['hyperparameters']['batch_size'] == 64, 'a refused tune changed something'

    ok = coordinator.post('/run/tune', {'changes': {'batch_size': 16, 'max_samples_per_iter': 8}, 'wait': 10})
    assert ok.status_code == 200, ok.text
    changes = ok.json()['data']['changes']
    assert changes['batch_size'] == {'old': 64, 'new': 16}
    assert changes['max_samples_per_iter'] == {'old': 4.0, 'new': 8.0}
    assert hyperparameter_gauge(coordinator, 'batch_size') == 16
    assert hyperparameter_gauge(coordinator, 'max_samples_per_iter') == 8
    assert any(e['event'] == 'tune' and 'batch_size' in e['changes'] for e in coordinator.status()['events'])
    # forwarded with the next learn task; the learner's data demand uses it from then on
    run.wait_for(
        lambda: learner.status()['hyperparameters'].get('batch_size') == 16,
        30,
        'the learner to apply the tuned batch size',
    )
    assert hyperparameter_gauge(learner, 'batch_size') == 16
    it = learner.status()['iteration']
    run.wait_for(lambda: learner.status()['iteration'] > it + 10, 30, 'training to go on with the new batch size')


@pytest.mark.slow
def test_the_token_is_only_in_the_private_run_files(live_run):
    """Not in a log (the start-up lines on stderr), not in a config dump: only where ``ding ctl`` reads it."""
    run, coordinator, learner = live_run
    holders = []
    for root, _, files in os.walk(run.cwd):
        for name in files:
            path = os.path.join(root, name)
            with open(path, 'rb') as f:
                if TOKEN.encode() in f.read():
                    holders.append(os.path.relpath(path, run.cwd))
    run_files = [f'{EXP}/run.json', f'{EXP}/run_learner0.json']
    assert sorted(holders) == sorted(['cfg.py'] + run_files)  # cfg.py: the user's own config file
    assert all(stat.S_IMODE(os.stat(os.path.join(run.cwd, p)).st_mode) == 0o600 for p in run_files)
    for dump in ('total_config.py', 'parallel_config.json'):
        with open(os.path.join(run.exp_dir, dump)) as f:
            assert '<redacted>' in f.read()
    assert 'control token in ./' in run.output()


@pytest.mark.slow
def test_terminate_writes_a_final_checkpoint_and_exits(live_run):
    run, coordinator, learner = live_run
    r = coordinator.post('/run/terminate', {'wait': 60})
    assert r.status_code == 200 and r.json()['data']['state'] == 'terminated', r.text
    assert run.proc.wait(60) == 0
    its = checkpoint_iterations(os.path.join(run.exp_dir, 'ckpt_learner0'))
    assert its and its[-1] > 20, its  # save_ckpt_after_iter is out of reach: this is the final one
    assert 'terminated by run control' in run.output()
    assert run.run_info() is None and run.run_info('run_learner0.json') is None


def test_http_transport_needs_the_service(tmp_path, monkeypatch):
    from ding.entry.parallel_entry import parallel_pipeline

    monkeypatch.chdir(tmp_path)
    cfg = write_config(str(tmp_path / 'cfg.py'), collector=dict(policy_transport='http'))
    with pytest.raises(ConfigError, match='policy_transport'):
        parallel_pipeline(cfg, 0)
    bad = write_config(str(tmp_path / 'bad.py'), collector=dict(policy_transport='ftp'))
    with pytest.raises((ConfigError, ValueError), match='policy_transport'):
        parallel_pipeline(bad, 0, ready_timeout=1.0)
