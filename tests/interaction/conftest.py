"""Fixtures for the interaction tests: real masters and slaves on 127.0.0.1, free ports, fast timings."""

from collections.abc import Callable
from typing import Any

import pytest

from ding.interaction import Master, Slave
from tests.helpers.interaction import FAST_MASTER, FAST_SLAVE, CalcSlave


@pytest.fixture
def make_slave() -> Callable[..., Slave]:
    """Factory: a started slave on a free port (``cls`` and kwargs customise it); all are closed at teardown."""
    started: list[Slave] = []

    def _make(cls: type = CalcSlave, **kwargs: Any) -> Slave:
        options = dict(FAST_SLAVE, port=0)
        options.update(kwargs)
        slave = cls(**options)
        slave.start()
        started.append(slave)
        return slave

    yield _make
    for slave in started:
        if hasattr(slave, 'release'):
            slave.release.set()  # let blocked tasks end so that join() returns
        slave.close()


@pytest.fixture
def make_master() -> Callable[..., Master]:
    """Factory: a started master on a free port; all are closed at teardown."""
    started: list[Master] = []

    def _make(**kwargs: Any) -> Master:
        options = dict(FAST_MASTER, port=0)
        options.update(kwargs)
        master = Master(**options)
        master.start()
        started.append(master)
        return master

    yield _make
    for master in started:
        master.close()


@pytest.fixture
def slave(make_slave) -> CalcSlave:
    return make_slave()


@pytest.fixture
def master(make_master) -> Master:
    return make_master()


@pytest.fixture
def conn(master, slave):
    """A connection from ``master`` to ``slave``, connected."""
    connection = master.new_connection('calc', '127.0.0.1', slave.port)
    connection.connect()
    yield connection
    connection.disconnect()
