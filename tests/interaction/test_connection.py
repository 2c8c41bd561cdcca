"""Connecting a master to slaves: hooks, refusal, registry of connections, disconnection."""

from typing import Any

import pytest
import requests

from ding.interaction import (
    ConnectionRefuse,
    DisconnectionRefuse,
    SlaveErrorCode,
    SlaveSlaveAlreadyConnected,
    SlaveSlaveConnectionRefused,
    SlaveSlaveDisconnectionRefused,
)
from tests.helpers.interaction import CalcSlave


class GateSlave(CalcSlave):
    """Accepts masters that present the right password; records every hook call."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple] = []
        self.keep_connection = False

    def _before_connection(self, data: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(('before_connection', data))
        if data.get('password') != 'sesame':
            raise ConnectionRefuse({'hint': 'wrong password'}, message='bad password')
        return {'cpu': 2}

    def _after_connection(self, status_code, success, code, message, data) -> None:
        self.calls.append(('after_connection', status_code, success, code))

    def _before_disconnection(self, data: dict[str, Any]) -> dict[str, Any]:
        if self.keep_connection:
            raise DisconnectionRefuse({'busy': True})
        return {'bye': data.get('reason')}

    def _after_disconnection(self, status_code, success, code, message, data) -> None:
        self.calls.append(('after_disconnection', status_code, success, code))


def test_connect_and_disconnect_with_context_manager(master, slave):
    with master.new_connection('calc', '127.0.0.1', slave.port) as conn:
        assert conn.is_connected and slave.is_connected
        assert 'calc' in master and master['calc'] is conn and list(master) == ['calc']
        assert slave.master_address == master.address
    assert not conn.is_connected and not slave.is_connected
    assert 'calc' not in master and len(master) == 0


def test_connect_disconnect_explicitly_and_del_item(master, slave):
    conn = master.new_connection('calc', '127.0.0.1', slave.port)
    assert not conn.is_connected and 'calc' not in master
    conn.connect()
    assert conn.is_connected and slave.is_connected
    conn.disconnect()
    assert not conn.is_connected and not slave.is_connected
    conn.disconnect()  # not connected: nothing to do

    conn = master.new_connection('calc', '127.0.0.1', slave.port)
    conn.connect()
    del master['calc']
    assert not conn.is_connected and 'calc' not in master and not slave.is_connected
    with pytest.raises(KeyError, match='calc'):
        master['calc']


def test_connection_data_reaches_the_hooks_and_the_reply_comes_back(master, make_slave):
    slave = make_slave(GateSlave)
    conn = master.new_connection('gate', '127.0.0.1', slave.port)
    assert conn.connect({'password': 'sesame'}) == {'cpu': 2}
    assert conn.disconnect({'reason': 'done'}) == {'bye': 'done'}
    assert slave.calls == [
        ('before_connection', {'password': 'sesame'}),
        ('after_connection', 200, True, 0),
        ('after_disconnection', 200, True, 0),
    ]


def test_refused_connection_raises_with_the_slaves_data(master, make_slave):
    slave = make_slave(GateSlave)
    conn = master.new_connection('gate', '127.0.0.1', slave.port)
    with pytest.raises(SlaveSlaveConnectionRefused) as info:
        conn.connect({'password': 'guess'})
    err = info.value
    assert isinstance(err, requests.HTTPError)  # callers catching HTTPError see it too
    assert err.status_code == 403 and err.code == SlaveErrorCode.SLAVE_CONNECTION_REFUSED
    assert err.message == 'bad password' and err.data == {'hint': 'wrong password'}
    assert not conn.is_connected and 'gate' not in master and not slave.is_connected
    assert slave.calls[-1] == ('after_connection', 403, False, SlaveErrorCode.SLAVE_CONNECTION_REFUSED)
    # a refused master can try again
    assert conn.connect({'password': 'sesame'}) == {'cpu': 2}
    conn.disconnect()


def test_refused_disconnection_keeps_the_connection(master, make_slave):
    slave = make_slave(GateSlave)
    conn = master.new_connection('gate', '127.0.0.1', slave.port)
    conn.connect({'password': 'sesame'})
    slave.keep_connection = True
    with pytest.raises(SlaveSlaveDisconnectionRefused) as info:
        conn.disconnect()
    assert info.value.data == {'busy': True}
    assert conn.is_connected and slave.is_connected and 'gate' in master
    slave.keep_connection = False
    conn.disconnect()
    assert not conn.is_connected and not slave.is_connected


def test_slave_serves_one_master_at_a_time(make_master, slave):
    first, second = make_master(), make_master()
    conn = first.new_connection('calc', '127.0.0.1', slave.port)
    conn.connect()
    intruder = second.new_connection('calc', '127.0.0.1', slave.port)
    with pytest.raises(SlaveSlaveAlreadyConnected):
        intruder.connect()
    assert not intruder.is_connected and conn.is_connected
    conn.disconnect()
    intruder.connect()  # free again
    assert intruder.is_connected
    intruder.disconnect()


def test_names_are_unique_while_connected(master, make_slave):
    one, two = make_slave(), make_slave()
    conn = master.new_connection('worker', '127.0.0.1', one.port)
    conn.connect()
    with pytest.raises(ValueError, match='worker'):
        master.new_connection('worker', '127.0.0.1', two.port)
    with pytest.raises(RuntimeError, match='already connected'):
        conn.connect()
    conn.disconnect()
    other = master.new_connection('worker', '127.0.0.1', two.port)
    other.connect()
    assert master['worker'] is other
    other.disconnect()


def test_connecting_to_nothing_raises_connection_error(master, make_slave):
    slave = make_slave()
    port = slave.port
    slave.close()
    conn = master.new_connection('ghost', '127.0.0.1', port)
    with pytest.raises(requests.ConnectionError):
        conn.connect()
    assert not conn.is_connected and 'ghost' not in master


def test_new_connection_checks_its_arguments(master):
    with pytest.raises(ValueError, match='name'):
        master.new_connection('', '127.0.0.1', 1234)
    with pytest.raises(ValueError, match='port'):
        master.new_connection('x', '127.0.0.1', 0)


def test_connect_needs_a_started_master(slave):
    from ding.interaction import Master

    master = Master(port=0)
    with pytest.raises(RuntimeError, match='not started'):
        master.new_connection('calc', '127.0.0.1', slave.port).connect()
