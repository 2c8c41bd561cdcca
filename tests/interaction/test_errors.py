"""
Malformed and unauthorised requests: each gets a 4xx JSON envelope with the right error code, is raised
client-side as the exception class of that code, and changes nothing; the servers keep serving.
"""

import importlib
import json
import socket
import threading

import pytest
import requests

from ding.interaction import (
    HttpClient,
    HttpLimits,
    MasterChannelNotMatch,
    MasterErrorCode,
    MasterResponseException,
    MasterSlaveTokenNotMatch,
    MasterTaskNotExist,
    SlaveChannelNotGiven,
    SlaveChannelNotMatch,
    SlaveErrorCode,
    SlaveMasterTokenNotMatch,
    SlaveResponseException,
    TaskStatus,
    get_master_exception_by_error,
    get_master_exception_class_by_error_code,
    get_slave_exception_by_error,
    get_slave_exception_class_by_error_code,
)
from tests.helpers.interaction import CalcSlave


def _url(service, path):
    return f'http://127.0.0.1:{service.port}{path}'


def _envelope(response):
    body = response.json()
    assert set(body) == {'success', 'code', 'message', 'data'} and body['success'] is False
    return body


def test_channel_mismatch_refuses_the_connection(make_master, slave):
    master = make_master(channel=7)
    conn = master.new_connection('calc', '127.0.0.1', slave.port)
    with pytest.raises(SlaveChannelNotMatch) as info:
        conn.connect()
    assert info.value.status_code == 403 and info.value.code == SlaveErrorCode.CHANNEL_NOT_MATCH
    assert not conn.is_connected and not slave.is_connected


def test_slave_checks_channel_and_master_token(conn, slave):
    url = _url(slave, '/task/new')
    task = {'task': {'id': 't1'}, 'data': {'op': 'add', 'a': 1, 'b': 1}}
    cases = [
        ({'Token': conn.master_token}, 400, SlaveErrorCode.CHANNEL_NOT_GIVEN),
        ({'Channel': '3', 'Token': conn.master_token}, 403, SlaveErrorCode.CHANNEL_NOT_MATCH),
        ({'Channel': 'zero', 'Token': conn.master_token}, 403, SlaveErrorCode.CHANNEL_NOT_MATCH),
        ({'Channel': '0'}, 401, SlaveErrorCode.MASTER_TOKEN_NOT_GIVEN),
        ({'Channel': '0', 'Token': 'forged'}, 403, SlaveErrorCode.MASTER_TOKEN_NOT_MATCH),
    ]
    for headers, status, code in cases:
        answer = requests.post(url, json=task, headers=headers, timeout=5)
        assert (answer.status_code, _envelope(answer)['code']) == (status, code), headers
    assert slave.seen == [] and slave.current_task_id is None and conn.is_connected


def test_client_side_exception_classes(conn, slave, master):
    forged = HttpClient(
        '127.0.0.1',
        slave.port,
        {'Channel': '0', 'Token': 'forged'},
        get_slave_exception_by_error,
        retries=3,
        retry_waiting=5.0,
    )
    with pytest.raises(SlaveMasterTokenNotMatch) as info:  # 4xx: raised at once, never retried
        forged.request('POST', '/task/new', {'task': {'id': 't'}, 'data': {}})
    assert isinstance(info.value, SlaveResponseException) and isinstance(info.value, requests.HTTPError)
    no_channel = HttpClient('127.0.0.1', slave.port, {'Token': conn.master_token}, get_slave_exception_by_error)
    with pytest.raises(SlaveChannelNotGiven):
        no_channel.request('DELETE', '/disconnect', {})
    assert conn.is_connected

    as_slave = {'Channel': '0', 'Token': conn.slave_token}
    callbacks = HttpClient('127.0.0.1', master.port, as_slave, get_master_exception_by_error, retries=0)
    with pytest.raises(MasterTaskNotExist) as info:
        callbacks.request('PUT', '/slave/task/complete', {'task': {'id': 'no-such-task'}, 'result': {}})
    assert info.value.status_code == 404 and info.value.code == MasterErrorCode.TASK_NOT_EXIST
    callbacks.request('GET', '/slave/heartbeat')  # the right token and channel are accepted
    impostor = HttpClient('127.0.0.1', master.port, {'Channel': '0', 'Token': 'forged'}, get_master_exception_by_error)
    with pytest.raises(MasterSlaveTokenNotMatch):
        impostor.request('GET', '/slave/heartbeat')
    wrong_channel = HttpClient('127.0.0.1', master.port, dict(as_slave, Channel='9'), get_master_exception_by_error)
    with pytest.raises(MasterChannelNotMatch):
        wrong_channel.request('GET', '/slave/heartbeat')


def test_every_error_code_has_its_exception_class():
    for code in MasterErrorCode:
        cls = get_master_exception_class_by_error_code(code)
        assert issubclass(cls, MasterResponseException) and cls is not MasterResponseException
    for code in SlaveErrorCode:
        cls = get_slave_exception_class_by_error_code(code)
        assert issubclass(cls, SlaveResponseException) and cls is not SlaveResponseException
    assert len({get_slave_exception_class_by_error_code(c) for c in SlaveErrorCode}) == len(SlaveErrorCode)
    # DI-engine's names are aliases of the same codes
    assert SlaveErrorCode.CHANNEL_INVALID is SlaveErrorCode.CHANNEL_NOT_MATCH
    assert MasterErrorCode.SLAVE_TOKEN_INVALID is MasterErrorCode.SLAVE_TOKEN_NOT_MATCH
    with pytest.raises(ValueError, match='unknown slave error code'):
        get_slave_exception_class_by_error_code(999)


def test_answer_without_envelope_gives_the_base_class():
    response = requests.Response()
    response.status_code, response._content = 502, b'<html>bad gateway</html>'
    err = get_master_exception_by_error(response)
    assert type(err) is MasterResponseException and err.code is None and 'bad gateway' in err.message


def _malformed_requests(master, slave, conn):
    """One request per kind: (method, url, headers, body, expected status, expected code)."""
    to_slave = {'Channel': '0', 'Token': conn.master_token}
    as_slave = {'Channel': '0', 'Token': conn.slave_token}
    s, m = slave.port, master.port
    S, M = SlaveErrorCode, MasterErrorCode
    return [
        ('POST', s, '/task/new', to_slave, b'{not json', 400, S.REQUEST_INVALID),
        ('POST', s, '/task/new', to_slave, b'[1, 2]', 400, S.REQUEST_INVALID),
        ('POST', s, '/task/new', to_slave, b'\xff\xfe\x00', 400, S.REQUEST_INVALID),
        ('POST', s, '/task/new', to_slave, b'', 400, S.REQUEST_INVALID),
        ('POST', s, '/task/new', to_slave, b'{"task": {}, "data": {}}', 400, S.TASK_DATA_INVALID),
        ('POST', s, '/task/new', to_slave, b'{"task": {"id": "x"}, "data": [1]}', 400, S.TASK_DATA_INVALID),
        ('POST', s, '/task/new', {'Token': conn.master_token}, b'{}', 400, S.CHANNEL_NOT_GIVEN),
        ('POST', s, '/task/new', {'Channel': '0', 'Token': 'x'}, b'{}', 403, S.MASTER_TOKEN_NOT_MATCH),
        ('POST', s, '/task/new', {'Channel': '0'}, b'{}', 401, S.MASTER_TOKEN_NOT_GIVEN),
        ('GET', s, '/task/new', to_slave, b'', 405, S.METHOD_NOT_ALLOWED),
        ('OPTIONS', s, '/task/new', to_slave, b'', 405, S.METHOD_NOT_ALLOWED),
        ('POST', s, '/no/such/route', to_slave, b'{}', 404, S.ROUTE_NOT_FOUND),
        # A bound slave refuses another connect before reading its body (malformed or not).
        (
            'POST',
            s,
            '/connect',
            {'Channel': '0', 'Token': 'y'},
            b'{"master": {"address": 5}}',
            409,
            S.SLAVE_ALREADY_CONNECTED,
        ),
        ('POST', s, '/connect', {'Channel': '0', 'Token': 'y'}, b'{"master": ', 409, S.SLAVE_ALREADY_CONNECTED),
        ('DELETE', s, '/disconnect', {'Channel': '1', 'Token': conn.master_token}, b'{}', 403, S.CHANNEL_NOT_MATCH),
        ('DELETE', s, '/disconnect', to_slave, b'"just a string"', 400, S.REQUEST_INVALID),
        ('DELETE', s, '/shutdown', {}, b'', 401, S.SELF_TOKEN_NOT_GIVEN),
        ('GET', m, '/slave/heartbeat', {'Channel': '0', 'Token': 'x'}, b'', 403, M.SLAVE_TOKEN_NOT_MATCH),
        ('GET', m, '/slave/heartbeat', {'Token': conn.slave_token}, b'', 400, M.CHANNEL_NOT_GIVEN),
        ('GET', m, '/slave/heartbeat', {'Channel': '0'}, b'', 401, M.SLAVE_TOKEN_NOT_GIVEN),
        ('PUT', m, '/slave/task/complete', as_slave, b'{"task": ', 400, M.REQUEST_INVALID),
        ('PUT', m, '/slave/task/complete', as_slave, b'{"task": {"id": "t"}, "result": 3}', 400, M.TASK_DATA_INVALID),
        ('PUT', m, '/slave/task/fail', as_slave, b'{"task": {"id": "nope"}}', 404, M.TASK_NOT_EXIST),
        ('PUT', m, '/slave/task/fail', as_slave, b'{"task": {"id": ""}}', 400, M.TASK_DATA_INVALID),
        ('PUT', m, '/slave/task/complete', dict(as_slave, Channel='x'), b'{}', 403, M.CHANNEL_NOT_MATCH),
        ('DELETE', m, '/shutdown', {'Token': 'guess'}, b'', 403, M.SELF_TOKEN_NOT_MATCH),
        ('POST', m, '/ping', {}, b'', 405, M.METHOD_NOT_ALLOWED),
        ('GET', m, '/slave', {}, b'', 404, M.ROUTE_NOT_FOUND),
    ]


def test_a_thousand_malformed_requests_change_nothing(master, slave, conn):
    kinds = _malformed_requests(master, slave, conn)
    with requests.Session() as session:
        session.trust_env = False
        for i in range(1000):
            method, port, path, headers, body, status, code = kinds[i % len(kinds)]
            answer = session.request(method, f'http://127.0.0.1:{port}{path}', data=body, headers=headers, timeout=5)
            assert (answer.status_code, _envelope(answer)['code']) == (status, code), (method, path, headers, body)
    assert master.ping() and slave.ping()
    # nothing changed: still connected to the same master, idle, no task ran, and a real task works
    assert conn.is_connected and slave.is_connected and slave.master_address == master.address
    assert slave.seen == [] and conn.tasks == []
    task = conn.new_task({'op': 'add', 'a': 20, 'b': 22}).start().join(5)
    assert task.status == TaskStatus.TASK_COMPLETED and task.result == {'sum': 42}


def test_server_answers_unexpected_errors_with_a_500_envelope(master, make_slave):

    class BrokenSlave(CalcSlave):
        def _before_connection(self, data):
            return {'not json': object()}

    slave = make_slave(BrokenSlave)
    answer = requests.post(
        _url(slave, '/connect'),
        data=json.dumps({'master': {'address': master.address}}),
        headers={'Channel': '0', 'Token': 't'},
        timeout=5,
    )
    assert answer.status_code == 500 and _envelope(answer)['code'] == SlaveErrorCode.UNKNOWN_ERROR
    assert not slave.is_connected and slave.ping()


def test_oversized_body_is_refused_before_reading(make_slave):
    slave = make_slave(limits=HttpLimits(control_body_bytes=1024))
    answer = requests.post(
        _url(slave, '/connect'), data=b'{' + b' ' * 4096 + b'}', headers={'Channel': '0', 'Token': 't'}, timeout=5
    )
    assert answer.status_code == 413 and _envelope(answer)['code'] == SlaveErrorCode.REQUEST_INVALID
    assert not slave.is_connected and slave.ping()


class _MuteServer:
    """A TCP server that accepts connections and then either never answers or hangs up without a word."""

    def __init__(self, hang_up: bool) -> None:
        self._sock = socket.create_server(('127.0.0.1', 0))
        self._sock.settimeout(0.05)  # accept() wakes up to see the stop flag
        self.port = self._sock.getsockname()[1]
        self.accepted = 0
        self._conns = []
        self._hang_up = hang_up
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            self.accepted += 1
            if self._hang_up:
                conn.recv(65536)
                conn.close()
            else:
                self._conns.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
        for conn in self._conns:
            conn.close()


@pytest.mark.parametrize('hang_up', [False, True])
def test_client_maps_transport_failures_to_requests_exceptions(hang_up):
    # A server that never answers: a read timeout, final unless the request is idempotent (the server may
    # have acted). One that hangs up after reading: a broken connection, retried like a refused one.
    server = _MuteServer(hang_up)
    try:
        client = HttpClient(
            '127.0.0.1', server.port, {}, get_slave_exception_by_error, retries=1, retry_waiting=0.01, timeout=0.2
        )
        expected = requests.ConnectionError if hang_up else requests.ReadTimeout
        with pytest.raises(expected):
            client.request('POST', '/task/new', {'task': {'id': 't'}})
        assert server.accepted == (2 if hang_up else 1)
        with pytest.raises(expected):
            client.request('GET', '/ping', idempotent=True)
        assert server.accepted == (4 if hang_up else 3)
    finally:
        server.close()


@pytest.mark.parametrize(
    ('module', 'base'),
    [
        ('ding.interaction.exception.master', 'MasterResponseException'),
        ('ding.interaction.exception.slave', 'SlaveResponseException'),
    ],
)
def test_exception_modules_export_every_exception_class(module, base):
    mod = importlib.import_module(module)
    root = getattr(mod, base)
    classes = {n for n, o in vars(mod).items() if isinstance(o, type) and issubclass(o, root)}
    assert classes <= set(mod.__all__)
