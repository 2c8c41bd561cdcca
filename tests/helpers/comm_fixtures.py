"""Fixtures shared by the comm learner and comm collector tests: a real comm worker and a real Master
on 127.0.0.1, each test in its own directory, everything closed at teardown."""

from collections.abc import Callable
from typing import Any

import pytest

from ding.interaction import Master


def define_comm_fixtures(
    namespace: dict[str, Any], comm_cls: type, comm_config: Callable[..., dict], master_kwargs: dict, slave_name: str
) -> None:
    """Put ``workdir``, ``make_comm``, ``master``, ``comm`` and ``conn`` fixtures into a conftest's namespace."""

    @pytest.fixture
    def workdir(tmp_path, monkeypatch):
        """The worker writes ``./{exp_name}/...``: run every test in its own directory."""
        monkeypatch.chdir(tmp_path)
        return tmp_path

    @pytest.fixture
    def make_comm(workdir):
        """Factory: a started comm worker (config overrides as kwargs); all are closed at teardown."""
        started = []

        def _make(**overrides):
            worker = comm_cls(comm_config(workdir, **overrides))
            started.append(worker)
            worker.start()
            return worker

        yield _make
        for worker in started:
            worker.close()

    @pytest.fixture
    def master():
        m = Master(port=0, **master_kwargs)
        m.start()
        yield m
        m.close()

    @pytest.fixture
    def comm(make_comm):
        return make_comm()

    @pytest.fixture
    def conn(master, comm):
        """The coordinator's connection to the comm worker, connected."""
        connection = master.new_connection(slave_name, '127.0.0.1', comm.port)
        connection.connect()
        yield connection
        connection.disconnect()

    namespace.update(workdir=workdir, make_comm=make_comm, master=master, comm=comm, conn=conn)
