"""The ES pipeline end to end: ``ding -m es`` with real worker processes solves CartPole; bad configs are refused
before any work."""

from __future__ import annotations

import copy
import os

import pytest

from ding.config import ConfigError
from ding.entry.async_entry import close_all
from ding.entry.cli import main as ding_main
from ding.entry.es_entry import build_es_parts, es_pipeline
from ding.service.run_file import read_run_file, run_file_path
from ding.utils.checkpoint import load_checkpoint
from ding.worker.es.stats import ES_COUNTERS
from dizoo.classic_control.cartpole.config import cartpole_es_config
from tests.helpers.processes import child_pids
from tests.helpers.service import session

CONFIG_FILE = cartpole_es_config.__file__


def _config() -> tuple:
    return copy.deepcopy(cartpole_es_config.main_config), copy.deepcopy(cartpole_es_config.create_config)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    yield
    assert not child_pids('ding.worker.es.worker_main')


@pytest.mark.parametrize(
    ('section', 'create_policy', 'message'),
    [
        (dict(chunk_byte=1024), 'es', r'policy\.es_server\.chunk_byte.*chunk_bytes'),
        (dict(very_old_lag=0), 'es', r'policy\.es_server\.very_old_lag = int 0 is out of range'),
        (dict(chunk_bytes=1022), 'es', r'chunk_bytes = 1022: must be a multiple of 4'),
        ({}, 'ppo', r"create_config\.policy\.type: the ES pipeline trains policy type 'es'"),
    ],
)
def test_a_bad_config_is_refused_before_any_work(tmp_path, section, create_policy, message):
    main, create = _config()
    main.policy.es_server = section
    create.policy.type = create_policy
    with pytest.raises(ConfigError, match=message):
        es_pipeline((main, create), seed=0)
    assert not os.listdir(tmp_path)


def test_ding_es_worker_runs_the_worker_command(capsys):
    with pytest.raises(SystemExit) as exc:
        ding_main(['es-worker', '--connect', 'no-port', '--token', 'T'])
    assert exc.value.code == 2 and 'HOST:PORT' in capsys.readouterr().err
    assert ding_main(['es-worker', '--connect', '127.0.0.1:1', '--token', 'T']) == 3  # nothing listens there


def test_the_server_counters_are_prometheus_gauges_of_the_run_service():
    main, create = _config()
    main.service = dict(enable=True)
    parts = build_es_parts(main, create, 0, None, None, None)
    try:
        url = read_run_file(run_file_path(parts.cfg.exp_name))['url']
        metrics = session().get(f'{url}/metrics', timeout=10).text
    finally:
        close_all(parts.closables)
    for name in ES_COUNTERS:
        assert f'\nes_{name} 0.0' in metrics, name


@pytest.mark.slow
def test_ding_es_solves_cartpole_with_local_workers(capsys):
    assert ding_main(['-m', 'es', '-c', CONFIG_FILE, '-s', '1', '--exp-name', 'es_run']) == 0
    err = capsys.readouterr().err
    summary = [line for line in err.splitlines() if line.startswith('[ding] es_run: ')]
    assert summary and 'SOLVED' in summary[-1], err[-3000:]
    with open('es_run/log/learner/learner_logger.txt') as f:
        counters = [line for line in f if 'es server: connected_workers' in line]
    assert counters and 'invalid_packets 0,' in counters[-1] and 'init_timeouts 0,' in counters[-1]
    state = load_checkpoint('es_run/ckpt/ckpt_best.safetensors', map_location='cpu')
    assert int(state['version']) >= 1 and state['optimizer']  # the ES state: parameters, Adam state, model version
