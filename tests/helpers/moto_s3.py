"""A real S3-compatible HTTP server for the tests: moto's standalone server on 127.0.0.1, with fake credentials.

The fixture ``s3`` points every S3 client of the test, and of the processes it starts, at
that server through ``AWS_ENDPOINT_URL``; ``endpoint_guard`` fails a test whose uploads could reach anything else.
``stop()`` / ``start()`` take the server away (refused connections, open ones reset) and bring it back on the
same port with its objects, which is how the tests make an object-store outage.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from ding.config.parallel import find_free_port

BUCKET = 'ding-ckpt'
FAKE_ENV = {
    'AWS_ACCESS_KEY_ID': 'testing',
    'AWS_SECRET_ACCESS_KEY': 'testing',
    'AWS_SESSION_TOKEN': 'testing',
    'AWS_DEFAULT_REGION': 'us-east-1',
    # no profile or credentials file of the machine running the tests is ever read
    'AWS_CONFIG_FILE': os.devnull,
    'AWS_SHARED_CREDENTIALS_FILE': os.devnull,
}


class _Outage:
    """A TCP relay on ``127.0.0.1:port`` to ``target``; ``close()`` drops the listener and every open connection,
    so clients see the outage a dead server causes (refused connections, reset keep-alive sockets)."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(('127.0.0.1', port))
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:  # accepted while closing
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in the relay's thread
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self._sockets.clear()


class MotoS3:
    """moto's S3 server with one bucket, ``BUCKET``, reached at ``endpoint`` through a relay that ``stop()`` takes
    away and ``start()`` brings back on the same port (moto itself keeps running, with the objects)."""

    def __init__(self) -> None:
        taken: set[int] = set()  # the relay's port and moto's differ
        self.port = find_free_port(taken=taken)
        self.endpoint = f'http://127.0.0.1:{self.port}'
        self._moto = ThreadedMotoServer(ip_address='127.0.0.1', port=find_free_port(taken=taken), verbose=False)
        self._moto.start()
        self._relay: _Outage | None = None

    def start(self) -> None:
        if self._relay is None:
            self._relay = _Outage(self.port, self._moto.get_host_and_port())

    def stop(self) -> None:
        if self._relay is not None:
            self._relay.close()
            self._relay = None

    def close(self) -> None:
        self.stop()
        self._moto.stop()

    def client(self):  # noqa: ANN201 - boto3's client type is generated at run time
        return boto3.client('s3', endpoint_url=self.endpoint)

    def keys(self, prefix: str = '') -> list[str]:
        listing = self.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        return sorted(o['Key'] for o in listing.get('Contents', []))

    def read(self, key: str) -> bytes:
        return self.client().get_object(Bucket=BUCKET, Key=key)['Body'].read()


def endpoint_guard(server: MotoS3) -> None:
    """Fail unless every S3 client of this process and its children talks to ``server`` only."""
    assert os.environ.get('AWS_ENDPOINT_URL') == server.endpoint, 'AWS_ENDPOINT_URL is not the test S3 server'
    assert server.endpoint.startswith('http://127.0.0.1:')


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoS3]:
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv('AWS_PROFILE', raising=False)
    server = MotoS3()
    monkeypatch.setenv('AWS_ENDPOINT_URL', server.endpoint)
    server.start()
    try:
        server.client().create_bucket(Bucket=BUCKET)
        endpoint_guard(server)
        yield server
    finally:
        server.close()
