"""Warm workers: the pipeline starts its worker processes while the config compiles (they import torch
meanwhile) and hands each one the worker it becomes; one it does not need ends having written nothing."""

import os
import subprocess
import sys
import time

import pytest

from ding.config.errors import ConfigError
from ding.entry.parallel_entry import WarmWorkers, expected_local_workers, parallel_pipeline
from tests.helpers.processes import child_env, worker_pids
from tests.helpers.toy_workers import toy_config


def _warm(tmp_path, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, '-m', 'ding.entry.parallel_worker', '--warm', str(tmp_path / 'exp')],
        input=stdin,
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        timeout=120,
    )


def test_a_warm_worker_that_is_not_needed_ends_without_a_trace(tmp_path):
    done = _warm(tmp_path, b'')
    assert done.returncode == 0 and done.stdout == b'' and b'Traceback' not in done.stderr
    assert os.listdir(tmp_path) == []


def test_a_warm_worker_refuses_a_malformed_assignment(tmp_path):
    done = _warm(tmp_path, b'{"role": "learner"}\n')
    assert done.returncode == 2
    assert b'bad assignment \'{"role": "learner"}\\n\'' in done.stderr and b'KeyError' in done.stderr


def test_a_config_that_does_not_compile_leaves_no_warm_worker(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    main, create, system = toy_config('toy_bad')
    main.policy.other.commander.eval_intervall = 1.0  # a misspelt key
    with pytest.raises(ConfigError, match='eval_intervall'):
        parallel_pipeline((main, create, system), seed=0)
    assert worker_pids(str(tmp_path)) == []  # the warm ones were started, and are gone
    assert os.listdir(tmp_path) == []


def test_warm_workers_are_counted_from_the_uncompiled_config():
    main, _, system = toy_config('toy_count')
    assert expected_local_workers(main, system) == 3  # one learner, two collectors
    system.collector = {'collector1': {'host': '10.1.2.3'}}  # started by the user on another machine
    assert expected_local_workers(main, system) == 2
    main.policy.collect.collector.collector_num = 'two'
    assert expected_local_workers(main, system) == 0  # compiling it says what is wrong


def test_discarded_warm_workers_are_reaped(tmp_path):
    warm = WarmWorkers(2, str(tmp_path / 'exp'))
    deadline = time.time() + 30  # each is forked, then runs python: its command line shows once it does
    while len(worker_pids(str(tmp_path))) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert len(worker_pids(str(tmp_path))) == 2
    assert warm.take({'torch_threads': 4}) is None  # torch's threads are fixed when it is imported
    warm.discard()
    assert worker_pids(str(tmp_path)) == []


BAD_CONFIG = """
from dizoo.classic_control.cartpole.config.parallel.cartpole_dqn_config import main_config, create_config, system_config
main_config.policy.other.commander.eval_intervall = 1.0  # a misspelt key
"""


def test_the_cli_compiles_in_a_warm_worker_and_a_bad_config_leaves_nothing(tmp_path):
    (tmp_path / 'bad_config.py').write_text(BAD_CONFIG)
    done = subprocess.run(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', 'bad_config.py', '-s', '0'],
        cwd=tmp_path,
        env=child_env(DING_PROGRESS='0'),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert 'policy.other.commander.eval_intervall' in done.stderr, done.stderr[-2000:]
    assert worker_pids(str(tmp_path)) == []
    assert os.listdir(tmp_path) == ['bad_config.py']
