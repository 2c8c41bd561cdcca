"""Server life cycle: start on a free port, ping, shutdown/join/close, nothing left listening."""

import ipaddress
import socket
import threading

import pytest
import requests

from ding.interaction import Master, MasterErrorCode, Slave, SlaveErrorCode, get_host_ip
from tests.helpers.interaction import CalcSlave
from tests.helpers.wait import wait_until


def _listening(port: int) -> bool:
    try:
        socket.create_connection(('127.0.0.1', port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _service_threads(port: int):
    return [t for t in threading.enumerate() if t.name.startswith('ding-') and t.name.endswith(f'-{port}')]


@pytest.mark.parametrize('make', [lambda: CalcSlave(port=0, heartbeat_span=0.05), lambda: Master(port=0)])
def test_start_shutdown_join_leave_nothing_listening(make):
    service = make()
    try:
        service.start()
        port = service.port
        assert port != 0 and _listening(port)
        assert service.ping()
        assert len(_service_threads(port)) == 2  # http server + heartbeat (slave) or checker (master)
    finally:
        service.shutdown()
        service.join(timeout=5)
    assert not _listening(port)
    assert not service.ping()
    assert _service_threads(port) == []


def test_context_manager_and_idempotent_close():
    with Master(port=0) as master, CalcSlave(port=0) as slave:
        assert master.ping() and slave.ping()
        ports = master.port, slave.port
    for port in ports:
        assert not _listening(port)
    master.close()  # again: no error
    slave.close()
    never_started = Master(port=0)
    never_started.close()
    with pytest.raises(RuntimeError, match='started once'):
        never_started.start()


def test_start_twice_raises(make_master):
    master = make_master()
    with pytest.raises(RuntimeError, match='started once'):
        master.start()


def test_port_in_use_is_reported_at_start(make_master):
    master = make_master()
    other = Master(port=master.port)
    with pytest.raises(OSError):
        other.start()
    other.close()


def test_shutdown_endpoint_needs_the_services_own_token(make_master, make_slave):
    for service, codes in ((make_master(), MasterErrorCode), (make_slave(), SlaveErrorCode)):
        url = f'http://127.0.0.1:{service.port}/shutdown'
        answer = requests.delete(url, timeout=5)
        assert answer.status_code == 401 and answer.json()['code'] == codes.SELF_TOKEN_NOT_GIVEN
        answer = requests.delete(url, headers={'Token': 'guess'}, timeout=5)
        assert answer.status_code == 403 and answer.json()['code'] == codes.SELF_TOKEN_NOT_MATCH
        assert service.ping()
        answer = requests.delete(url, headers={'Token': service.self_token}, timeout=5)
        assert answer.status_code == 200 and answer.json()['success'] is True
        assert wait_until(lambda port=service.port: not _listening(port))
        service.join(timeout=5)


def test_ping_answers_an_envelope(make_slave):
    slave = make_slave()
    body = requests.get(f'http://127.0.0.1:{slave.port}/ping', timeout=5).json()
    assert body == {'success': True, 'code': 0, 'message': 'PONG!', 'data': {'role': 'slave'}}


def test_my_address_defaults():
    assert Master(host='127.0.0.1', port=0).my_address == '127.0.0.1'
    assert Master(host='0.0.0.0', port=0).my_address == get_host_ip()
    assert Master(port=0, my_address='10.1.2.3').address == 'http://10.1.2.3:0'
    ipaddress.ip_address(get_host_ip())  # a valid IP, 127.0.0.1 when there is no outbound route


@pytest.mark.parametrize(
    'kwargs, match',
    [
        (dict(heartbeat_tolerance=0), 'heartbeat_tolerance'),
        (dict(heartbeat_check_span=-1), 'heartbeat_check_span'),
        (dict(request_retries=-1), 'request_retries'),
        (dict(request_retry_waiting='1'), 'request_retry_waiting'),
        (dict(channel='0'), 'channel'),
        (dict(port=70000), 'port'),
        (dict(my_address=''), 'my_address'),
    ],
)
def test_master_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Master(**kwargs)


@pytest.mark.parametrize('kwargs, match', [(dict(heartbeat_span=0), 'heartbeat_span'), (dict(port=-1), 'port')])
def test_slave_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Slave(**kwargs)
