"""``HttpClient`` against a real HTTP server on 127.0.0.1: the data of a success envelope comes back, and a
failed answer is raised with a real ``requests.Response`` (body, status, headers, the request it answered)."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from ding.interaction.base.client import HttpClient
from ding.interaction.exception import SlaveRequestInvalid, get_slave_exception_by_error

ANSWERS = {
    '/ok': (200, {'success': True, 'code': 0, 'message': 'fine', 'data': {'answer': 42}}),
    '/invalid': (400, {'success': False, 'code': 102, 'message': 'bad request', 'data': {'field': 'x'}}),
}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 -- the name http.server calls
        self.rfile.read(int(self.headers.get('Content-Length', 0)))
        status, envelope = ANSWERS[self.path]
        body = json.dumps(envelope).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- http.server's signature
        pass


@pytest.fixture
def client() -> Iterator[HttpClient]:
    server = ThreadingHTTPServer(('127.0.0.1', 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield HttpClient('127.0.0.1', server.server_address[1], {}, get_slave_exception_by_error, retries=0)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_success_returns_the_envelope_data(client):
    assert client.request('POST', '/ok', {'x': 1}) == {'answer': 42}


def test_a_failed_answer_carries_a_real_response(client):
    with pytest.raises(SlaveRequestInvalid) as caught:
        client.request('POST', '/invalid', {'x': 1})
    error = caught.value
    assert (error.status_code, error.code, error.message, error.data) == (400, 102, 'bad request', {'field': 'x'})
    response = error.response
    assert isinstance(response, requests.Response)
    assert response.status_code == 400 and response.headers['content-type'] == 'application/json'
    assert response.json() == ANSWERS['/invalid'][1]
    assert response.request.method == 'POST' and response.request.url == f'{client.base_url}/invalid'
    assert 'POST' in str(error) and '/invalid' in str(error)
