"""Both comm workers start their slave through ``SlaveHost`` and, when it cannot start (the port is taken), release
what they acquired: log file, read pool and policy publisher threads. The process can then start again."""

import logging
import socket
import threading

import pytest

from ding.worker.collector.comm.flask_fs_collector import FlaskFileSystemCollector
from ding.worker.learner.comm import FlaskFileSystemLearner


@pytest.fixture
def taken_port():
    """A port something else listens on (a plain socket on 127.0.0.1)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(('127.0.0.1', 0))
    sock.listen(1)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _threads_named(prefix):
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


@pytest.mark.parametrize('worker_cls', [FlaskFileSystemLearner, FlaskFileSystemCollector])
def test_a_failed_start_releases_everything_and_a_later_start_works(worker_cls, taken_port, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = f'{worker_cls.__name__.lower()}_w'
    cfg = dict(name=name, exp_name='exp', host='127.0.0.1', port=taken_port, path_data='data', path_policy='policy')
    worker = worker_cls(cfg)
    with pytest.raises(OSError):
        worker.start()
    assert worker.slave is None
    assert logging.getLogger(f'comm_{name}').handlers == []  # the log file is released
    assert _threads_named(f'ding-{name}-') == []  # no read pool / publisher thread left behind

    again = worker_cls(dict(cfg, port=0))
    again.start()
    try:
        assert again.slave is not None and again.port not in (0, taken_port)
    finally:
        again.close()
    assert again.slave is not None and logging.getLogger(f'comm_{name}').handlers == []
