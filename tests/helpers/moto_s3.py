"""A real S3-compatible HTTP server for the tests: moto's standalone server on 127.0.0.1, with fake credentials.

The fixture ``s3`` (see ``s3_server``) points every S3 client of the test, and of the processes it starts, at
that server through ``AWS_ENDPOINT_URL``; ``endpoint_guard`` fails a test whose uploads could reach anything else.
``stop()`` / ``start()`` take the server away and bring it back on the same port (its buckets survive: moto keeps
them in this process), which is how the tests make an object-store outage.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


class MotoS3:
    """moto's S3 server on ``127.0.0.1:port`` with one bucket, ``BUCKET``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f'http://127.0.0.1:{self.port}'
        self._server: ThreadedMotoServer | None = None

    def start(self) -> None:
        if self._server is not None:
            return
        self._server = ThreadedMotoServer(ip_address='127.0.0.1', port=self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

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
        server.stop()
