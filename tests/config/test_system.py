"""The system section of a parallel config and the top level of any config are checked before any work: unknown keys
with "did you mean", wrong types, out-of-range values; each named by its full key path."""

import os
import subprocess
import sys

import pytest

from ding.config import ConfigError, compile_config
from ding.config.loader import read_config
from ding.config.parallel import compile_config_parallel
from tests.helpers.config_toys import TOY_CREATE, toy_main
from tests.helpers.processes import ROOT, child_env, worker_pids
from tests.helpers.tls import make_pki

CONFIG = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_config.py')


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv('DING_ALLOW_UNKNOWN_KEYS', raising=False)
    return tmp_path


def refused(change, save_cfg: bool = False) -> str:
    """The message of the ConfigError compiling the cartpole parallel config raises after ``change(main, system)``."""
    main, create, system = read_config(CONFIG)
    change(main, system)
    with pytest.raises(ConfigError) as info:
        compile_config_parallel(main, create, system, save_cfg=save_cfg)
    return str(info.value)


def test_comm_batches_zero_is_refused_with_its_key_and_nothing_is_written(in_tmp):
    msg = refused(lambda main, system: system.learner.learner0.update(comm_batches=0), save_cfg=True)
    assert 'system.learner.learner0.comm_batches = int 0 is out of range: must be >= 1' in msg
    assert os.listdir(in_tmp) == []  # no experiment directory, no total_config.py


@pytest.mark.parametrize(
    'key, value, expected',
    [
        ('task_retries', -1, 'system.coordinator.task_retries = int -1 is out of range: must be >= 0'),
        ('learner_request_timeout', 0, 'system.coordinator.learner_request_timeout = int 0 is out of range'),
        ('log_every_iter', 0, 'system.coordinator.log_every_iter = int 0 is out of range: must be >= 1'),
        ('max_samples_per_iter', 'many', "system.coordinator.max_samples_per_iter: expected a number, got str 'many'"),
    ],
)
def test_coordinator_values_out_of_range_are_refused(in_tmp, key, value, expected):
    assert expected in refused(lambda main, system: system.coordinator.update({key: value}))


def test_coordinator_typo_is_refused_with_a_suggestion(in_tmp):
    msg = refused(lambda main, system: system.coordinator.update(heartbeat_tolerence=3.0))
    assert "system.coordinator.heartbeat_tolerence: unknown key 'heartbeat_tolerence' in system.coordinator" in msg
    assert "did you mean 'heartbeat_tolerance'" in msg


def test_coordinator_wrong_types_are_refused_before_any_worker(in_tmp):
    msg = refused(lambda main, system: system.coordinator.update(task_retries='3', keep_data='no', retry_delay=[1]))
    assert "system.coordinator.task_retries: expected an integer (default int 3), got str '3'" in msg
    assert "system.coordinator.keep_data: expected True or False (default bool False), got str 'no'" in msg
    assert 'system.coordinator.retry_delay: expected a number' in msg
    assert '3 problems' in msg


def test_system_keys_and_worker_entries_are_checked(in_tmp):
    msg = refused(lambda main, system: system.update(path_polcy='./p', learner_gpu_num=-1))
    assert "system.path_polcy: unknown key 'path_polcy' in system; did you mean 'path_policy'?" in msg
    assert 'system.learner_gpu_num = int -1 is out of range' in msg
    msg = refused(lambda main, system: system.update(learner=dict(lerner0=dict(comm_batches=2))))
    assert "system.learner.lerner0: unknown key 'lerner0' in system.learner; did you mean 'learner0'?" in msg
    msg = refused(lambda main, system: system.update(collector=dict(collector0=dict(queue_sise=3, torch_threads=0))))
    assert "system.collector.collector0.queue_sise: unknown key 'queue_sise'" in msg and "'queue_size'" in msg
    assert 'system.collector.collector0.torch_threads = int 0 is out of range: must be >= 1' in msg
    msg = refused(lambda main, system: system.learner.learner0.update(send_policy_min_interval='0.1'))
    assert (
        "system.learner.learner0.send_policy_min_interval: expected a number (default float 0.2), got str '0.1'" in msg
    )
    msg = refused(lambda main, system: system.learner.learner0.update(use_distributed=True))
    assert 'system.learner.learner0.use_distributed: True is not supported' in msg


def test_learner_num_must_be_a_positive_integer(in_tmp):
    msg = refused(lambda main, system: main.policy.learn.learner.update(learner_num=0))
    assert 'policy.learn.learner.learner_num = int 0 is out of range: must be >= 1' in msg


def test_secret_file_is_a_path_or_none(in_tmp):
    for value in ('/run/ding/secret', None):
        main, create, system = read_config(CONFIG)
        system.secret_file = value
        cfg = compile_config_parallel(main, create, system, save_cfg=False)
        assert cfg.system.secret_file == value
    msg = refused(lambda main, system: system.update(secret_file=3))
    assert 'system.secret_file: expected a path string or None, got int 3' in msg


def test_unknown_system_keys_can_be_allowed(in_tmp, monkeypatch):
    def change(main, system):
        system.coordinator.my_setting = 1

    main, create, system = read_config(CONFIG)
    change(main, system)
    system.allow_unknown_keys = True
    compile_config_parallel(main, create, system, save_cfg=False)
    monkeypatch.setenv('DING_ALLOW_UNKNOWN_KEYS', '1')
    main, create, system = read_config(CONFIG)
    change(main, system)
    main.srvice = dict(enable=True)
    compile_config_parallel(main, create, system, save_cfg=False)
    # bounds still hold
    assert 'comm_batches' in refused(lambda main, system: system.learner.learner0.update(comm_batches=0))


def test_unknown_top_level_key_is_refused_in_serial_and_parallel_mode(in_tmp):
    cfg = toy_main()
    cfg['srvice'] = dict(enable=True)
    with pytest.raises(ConfigError) as info:
        compile_config(cfg, auto=True, create_cfg=TOY_CREATE, save_cfg=True)
    assert "srvice: unknown key 'srvice' in <top level>; did you mean 'service'?" in str(info.value)
    assert os.listdir(in_tmp) == []
    msg = refused(lambda main, system: main.update(srvice=dict(enable=True)))
    assert "did you mean 'service'?" in msg
    # the keys the pipelines read there are fine
    cfg = toy_main()
    cfg.update(exp_name='toy_ok', seed=1, service=dict(enable=False), resume='never')
    compile_config(cfg, auto=True, create_cfg=TOY_CREATE, save_cfg=False)


def test_cli_refuses_a_bad_system_section_before_any_worker_starts(tmp_path):
    bad = tmp_path / 'bad.py'
    bad.write_text(
        f'base = {CONFIG!r}\n'
        "main_config = dict(exp_name='bad_run')\n"
        'system_config = dict(learner=dict(learner0=dict(comm_batches=0)))\n'
    )
    proc = subprocess.run(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', str(bad)],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    last_lines = proc.stderr.strip().splitlines()[-3:]
    assert any('system.learner.learner0.comm_batches' in line for line in last_lines), proc.stderr
    # no worker was handed a role: no experiment directory (logs, run files, config dumps) was written, and no
    # worker process (not even one started early to import torch) outlives the refusal
    assert sorted(os.listdir(tmp_path)) == ['bad.py']
    assert worker_pids(str(tmp_path)) == []


def test_learner_config_keys_of_the_comm_learner_are_known_and_bounded(in_tmp):
    main, create, system = read_config(CONFIG)
    main.policy.learn.learner.update(comm_batches=8.0, max_staleness=100)
    system.learner.learner0.comm_batches = 32.0
    cfg = compile_config_parallel(main, create, system, save_cfg=False)
    # integral floats become the ints the comm learner checks for
    assert type(cfg.main.policy.learn.learner.comm_batches) is int and cfg.main.policy.learn.learner.comm_batches == 8
    assert type(cfg.system.learner.learner0.comm_batches) is int and cfg.system.learner.learner0.comm_batches == 32
    msg = refused(lambda main, system: main.policy.learn.learner.update(comm_batches=0, max_staleness=-1))
    assert 'policy.learn.learner.comm_batches = int 0 is out of range: must be >= 1' in msg
    assert 'policy.learn.learner.max_staleness = int -1 is out of range' in msg
    msg = refused(lambda main, system: main.policy.other.replay_buffer.update(max_use=0))
    assert 'policy.other.replay_buffer.max_use = int 0 is out of range' in msg


def test_http_limits_are_system_keys_with_bounds(in_tmp):
    msg = refused(
        lambda main, system: system.update(
            http=dict(control_body_bytes=10, read_timeout=0, max_connections='many', read_timout=5)
        )
    )
    assert 'system.http.control_body_bytes = int 10 is out of range: must be in [1024, 16777216]' in msg
    assert 'system.http.read_timeout = int 0 is out of range' in msg
    assert "system.http.max_connections: expected an integer, got str 'many'" in msg
    assert "system.http.read_timout: unknown key 'read_timout' in system.http; did you mean 'read_timeout'?" in msg
    main, create, system = read_config(CONFIG)
    system.http = dict(control_body_bytes=4096, read_timeout=2.5)
    cfg = compile_config_parallel(main, create, system, save_cfg=False)
    assert cfg.system.http == dict(control_body_bytes=4096, read_timeout=2.5)


def test_tls_files_are_checked_before_any_worker(in_tmp):
    pki = make_pki(str(in_tmp))
    os.chmod(pki.key_file, 0o640)
    msg = refused(lambda main, system: system.update(tls=dict(pki.tls_section(), ca_fle='x')))
    assert f'system.tls.key_file: key file {pki.key_file} is readable by other users (mode 640); chmod 600 it' in msg
    assert "system.tls.ca_fle: unknown key 'ca_fle' in system.tls; did you mean 'ca_file'" in msg
    os.chmod(pki.key_file, 0o600)
    msg = refused(lambda main, system: system.update(tls=dict(cert_file=pki.cert_file)))
    assert 'system.tls.key_file: required when system.tls is set' in msg
    main, create, system = read_config(CONFIG)
    system.tls = pki.tls_section()
    assert compile_config_parallel(main, create, system, save_cfg=False).system.tls.ca_file == pki.ca_file


def test_tls_with_weights_over_plain_http_is_refused(in_tmp):
    pki = make_pki(str(in_tmp))

    def change(main, system):
        system.tls = pki.tls_section()
        main.policy.collect.collector.policy_transport = 'http'

    msg = refused(change)
    assert "policy_transport='http' fetches weights from the learner's run service without the run's CA" in msg
