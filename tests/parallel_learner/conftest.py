"""Fixtures for the comm learner tests: a real FlaskFileSystemLearner and a real Master on 127.0.0.1."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for comm_helpers, whatever the import mode

from ding.interaction import Master  # noqa: E402
from ding.worker.learner.comm import FlaskFileSystemLearner  # noqa: E402
from comm_helpers import FAST_MASTER, comm_config  # noqa: E402


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """The learner writes ``./{exp_name}/...``: run every test in its own directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def make_comm(workdir):
    """Factory: a started comm learner (config overrides as kwargs); all are closed at teardown."""
    started = []

    def _make(**overrides):
        comm = FlaskFileSystemLearner(comm_config(workdir, **overrides))
        started.append(comm)
        comm.start()
        return comm

    yield _make
    for comm in started:
        comm.close()


@pytest.fixture
def master():
    m = Master(port=0, **FAST_MASTER)
    m.start()
    yield m
    m.close()


@pytest.fixture
def comm(make_comm):
    return make_comm()


@pytest.fixture
def conn(master, comm):
    """The coordinator's connection to the comm learner, connected."""
    connection = master.new_connection('learner0', '127.0.0.1', comm.port)
    connection.connect()
    yield connection
    connection.disconnect()
