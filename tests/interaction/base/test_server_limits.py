"""Bounds of every HTTP server (ding.interaction.base.server): body size checked before reading, JSON depth,
per-connection read timeout and the cap on concurrent connections. Real servers on 127.0.0.1, raw sockets."""

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import request

from ding.interaction import config
from ding.interaction.base.envelope import parse_json_object, success_response
from ding.interaction.base.limits import HttpLimits
from ding.interaction.base.server import HttpService, Route
from ding.interaction.exception import SlaveErrorCode
from tests.helpers.interaction import CalcSlave


class EchoService(HttpService):
    """A minimal server: ``POST /control`` (a control route) and ``POST /data`` (a data route) echo their body."""

    _role = 'echo'
    _codes = SlaveErrorCode
    _data_routes = frozenset({'/data'})

    def _routes(self) -> list[Route]:
        return [
            ('/ping', ['GET'], self._api_ping),
            ('/control', ['POST'], self._echo),
            ('/data', ['POST'], self._echo),
        ]

    def _echo(self) -> dict[str, Any]:
        body = parse_json_object(request.get_data(), SlaveErrorCode.REQUEST_INVALID)
        return success_response({'keys': sorted(body)})


@pytest.fixture
def echo() -> Iterator[EchoService]:
    service = EchoService('127.0.0.1', 0, limits=HttpLimits(read_timeout=0.5, max_connections=4))
    service.start()
    try:
        yield service
    finally:
        service.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(('127.0.0.1', port), timeout=5.0)
    return sock


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """Status and JSON body of the answer on ``sock`` (read until the server closes)."""
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
    head, _, body = b''.join(chunks).partition(b'\r\n\r\n')
    status = int(head.split(b' ', 2)[1])
    if b'chunked' in head.lower():
        size, _, rest = body.partition(b'\r\n')
        body = rest[: int(size, 16)]
    return status, json.loads(body)


def _request(port: int, method: str, path: str, body: bytes = b'', headers: dict[str, str] | None = None) -> bytes:
    lines = [f'{method} {path} HTTP/1.1', f'Host: 127.0.0.1:{port}']
    lines += [f'{k}: {v}' for k, v in (headers or {}).items()]
    return ('\r\n'.join(lines) + '\r\n\r\n').encode() + body


def _post(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    headers = {'Content-Type': 'application/json', 'Content-Length': str(len(body)), **(headers or {})}
    with _connect(port) as sock:
        sock.sendall(_request(port, 'POST', path, body, headers))
        return _read_answer(sock)


def _nested(depth: int) -> bytes:
    return ('{"a":' * depth + '1' + '}' * depth).encode()


def test_oversized_control_body_is_refused_before_it_is_sent(make_slave) -> None:
    # A slave's /connect is reachable before any authentication: 20 MB announced, nothing sent, 413 at once.
    slave = make_slave(cls=CalcSlave)
    started = time.monotonic()
    with _connect(slave.port) as sock:
        sock.sendall(_request(slave.port, 'POST', '/connect', headers={'Content-Length': str(20 * 1024 * 1024)}))
        status, body = _read_answer(sock)
    assert status == 413 and body['success'] is False
    assert body['code'] == SlaveErrorCode.REQUEST_INVALID and str(config.MAX_CONTROL_REQUEST_BYTES) in body['message']
    assert time.monotonic() - started < 2.0  # not waiting for a body that never comes
    assert slave.ping() and not slave.is_connected


def test_data_routes_take_large_bodies_control_routes_do_not(echo: EchoService) -> None:
    big = json.dumps({'blob': 'x' * (config.MAX_CONTROL_REQUEST_BYTES + 1)}).encode()
    assert _post(echo.port, '/control', big)[0] == 413
    status, body = _post(echo.port, '/data', big)
    assert status == 200 and body['data'] == {'keys': ['blob']}
    with _connect(echo.port) as sock:
        sock.sendall(
            _request(echo.port, 'POST', '/data', headers={'Content-Length': str(config.MAX_REQUEST_BYTES + 1)})
        )
        assert _read_answer(sock)[0] == 413


def test_chunked_body_is_refused(echo: EchoService) -> None:
    with _connect(echo.port) as sock:
        sock.sendall(_request(echo.port, 'POST', '/data', b'2\r\n{}\r\n0\r\n\r\n', {'Transfer-Encoding': 'chunked'}))
        status, body = _read_answer(sock)
    assert status == 411 and 'Content-Length' in body['message']


def test_json_depth_is_bounded_and_malformed_bodies_get_400(echo: EchoService) -> None:
    assert _post(echo.port, '/data', _nested(config.MAX_JSON_DEPTH))[0] == 200
    too_deep = _post(echo.port, '/data', _nested(config.MAX_JSON_DEPTH + 1))
    assert too_deep[0] == 400 and 'nested deeper' in too_deep[1]['message']
    # Deep enough to exhaust the decoder's recursion (an HTTP 500 before): 400 too.
    assert _post(echo.port, '/data', b'[' * 200_000 + b']' * 200_000)[0] == 400
    for garbage in (b'{"a": ', b'\xff\xfe', b'[1, 2]', b'null'):
        status, body = _post(echo.port, '/control', garbage)
        assert status == 400 and body['success'] is False, garbage
    assert echo.ping()


def test_deep_connect_body_gets_400_and_the_slave_keeps_serving(make_slave) -> None:
    slave = make_slave(cls=CalcSlave)
    status, body = _post(slave.port, '/connect', _nested(1000), {'Channel': '0', 'Token': 'master-token'})
    assert status == 400 and body['code'] == SlaveErrorCode.REQUEST_INVALID
    assert slave.ping() and not slave.is_connected


def test_half_sent_requests_are_closed_within_the_read_timeout(echo: EchoService) -> None:
    half_head = _connect(echo.port)
    half_body = _connect(echo.port)
    try:
        started = time.monotonic()
        half_head.sendall(b'POST /data HTTP/1.1\r\nHost: x\r\nContent-Le')
        half_body.sendall(_request(echo.port, 'POST', '/data', b'{"a": ', {'Content-Length': '100'}))
        assert half_head.recv(65536) == b''  # closed by the server without an answer
        status, body = _read_answer(half_body)
        assert status == 408 and body['success'] is False
        assert time.monotonic() - started < 0.5 + 2.0
    finally:
        half_head.close()
        half_body.close()
    assert echo.ping()


def test_connections_beyond_the_cap_are_refused_at_once_not_queued(echo: EchoService) -> None:
    idle = [_connect(echo.port) for _ in range(4)]  # every slot held by a client that sends nothing
    try:
        time.sleep(0.1)  # let the server accept them
        started = time.monotonic()
        with _connect(echo.port) as extra:
            extra.sendall(_request(echo.port, 'GET', '/ping'))
            status, body = _read_answer(extra)
        assert status == 503 and 'Too many connections' in body['message']
        assert time.monotonic() - started < 0.4  # answered before the idle ones time out
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 5.0
    while not echo.ping() and time.monotonic() < deadline:  # the slots come back once those close
        time.sleep(0.05)
    assert echo.ping()


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match='max_connections'):
        HttpLimits(max_connections=0)
    with pytest.raises(ValueError, match='read_timeout'):
        HttpLimits(read_timeout=-1)
    with pytest.raises(ValueError, match=r"system.http: unknown key\(s\) \['read_timout'\]"):
        HttpLimits.from_config({'read_timout': 5})
    with pytest.raises(ValueError, match='system.http.control_body_bytes must be an int >= 1'):
        HttpLimits.from_config({'control_body_bytes': 0})
    with pytest.raises(TypeError, match='limits must be an HttpLimits'):
        EchoService('127.0.0.1', 0, limits={'read_timeout': 1})


def test_limits_from_the_system_config_bound_every_route() -> None:
    # system.http = dict(control_body_bytes=2048, data_body_bytes=8192): both limits answer 413 from the headers.
    limits = HttpLimits.from_config({'control_body_bytes': 2048, 'data_body_bytes': 8192, 'max_connections': None})
    assert limits.max_connections == config.DEFAULT_MAX_CONNECTIONS  # None keeps the default
    limits = HttpLimits.from_config({'control_body_bytes': 2048, 'data_body_bytes': 8192, 'read_timeout': 0.5})
    with EchoService('127.0.0.1', 0, limits=limits) as service:
        assert _post(service.port, '/control', json.dumps({'a': 'x' * 1000}).encode())[0] == 200
        status, body = _post(service.port, '/control', json.dumps({'a': 'x' * 3000}).encode())
        assert status == 413 and '2048' in body['message']
        assert _post(service.port, '/data', json.dumps({'a': 'x' * 3000}).encode())[0] == 200
        assert _post(service.port, '/data', json.dumps({'a': 'x' * 9000}).encode())[0] == 413
