"""TLS between masters and slaves (``system.tls``): traffic works over HTTPS with certificates made by ``openssl``;
a plain-HTTP client, a client trusting another CA and a slave called back over plain HTTP all fail; a client
that connects and never says hello holds no other connection up. Real servers on 127.0.0.1."""

import os
import socket
import ssl
import time

import pytest
import requests

from ding.interaction import SlaveErrorCode
from ding.interaction.base.auth import new_run_secret
from ding.interaction.base.limits import HttpLimits
from ding.utils.tls import TlsSettings, tls_problems
from tests.helpers.tls import Pki, make_pki

SECRET = new_run_secret()


@pytest.fixture(scope='module')
def pki(tmp_path_factory) -> Pki:
    return make_pki(str(tmp_path_factory.mktemp('pki')))


@pytest.fixture
def tls(pki) -> TlsSettings:
    settings = TlsSettings.from_config(pki.tls_section())
    assert settings is not None
    return settings


def test_master_and_slave_work_over_tls(make_master, make_slave, tls):
    slave = make_slave(secret=SECRET, tls=tls)
    master = make_master(secret=SECRET, tls=tls)
    assert master.address.startswith('https://')
    conn = master.new_connection('s', '127.0.0.1', slave.port)
    assert conn.ping()
    conn.connect()
    assert slave.is_connected and slave.master_address == master.address
    assert conn.new_task({'op': 'add', 'a': 2, 'b': 3}).start().join(5).result == {'sum': 5}
    assert slave.ping() and master.ping()


def test_plain_http_and_a_client_trusting_another_ca_get_nothing(make_slave, tls, pki):
    slave = make_slave(secret=SECRET, tls=tls)
    with requests.Session() as session:
        session.trust_env = False
        with pytest.raises(requests.ConnectionError):
            session.get(f'http://127.0.0.1:{slave.port}/ping', timeout=5)
        with pytest.raises(requests.exceptions.SSLError):
            session.get(f'https://127.0.0.1:{slave.port}/ping', timeout=5, verify=pki.other_ca_file)
        assert session.get(f'https://127.0.0.1:{slave.port}/ping', timeout=5, verify=pki.ca_file).status_code == 200
    assert slave.ping()


def test_a_master_trusting_another_ca_cannot_connect(make_master, make_slave, tls, pki):
    slave = make_slave(secret=SECRET, tls=tls)
    wrong = TlsSettings.from_config(pki.tls_section(ca_file=pki.other_ca_file))
    master = make_master(secret=SECRET, tls=wrong)
    with pytest.raises(requests.ConnectionError, match='CERTIFICATE_VERIFY_FAILED'):
        master.new_connection('s', '127.0.0.1', slave.port).connect()
    assert not slave.is_connected


def test_a_plain_master_is_refused_by_a_tls_slave(make_master, make_slave, tls, pki):
    # A master without TLS cannot even reach a TLS slave; one that reaches it (TLS for the request) but gives a
    # plain callback address is refused: the slave's token would go back in clear.
    slave = make_slave(tls=tls)
    with pytest.raises(requests.ConnectionError):
        make_master().new_connection('s', '127.0.0.1', slave.port).connect()
    with requests.Session() as session:
        session.trust_env = False
        answer = session.post(
            f'https://127.0.0.1:{slave.port}/connect',
            json={'master': {'address': 'http://127.0.0.1:1'}},
            headers={'Channel': '0', 'Token': 't'},
            verify=pki.ca_file,
            timeout=5,
        )
    assert answer.status_code == 400 and answer.json()['code'] == SlaveErrorCode.REQUEST_INVALID
    assert 'https' in answer.json()['message'] and not slave.is_connected


def test_a_client_that_never_says_hello_holds_up_no_one(make_slave, tls, pki):
    # The handshake runs on the connection's own thread, within the read timeout, not on the accepting thread.
    slave = make_slave(tls=tls, limits=HttpLimits(read_timeout=1.0))
    silent = socket.create_connection(('127.0.0.1', slave.port), timeout=5)
    try:
        started = time.monotonic()
        assert slave.ping(timeout=2.0)
        assert time.monotonic() - started < 1.0
        assert silent.recv(1) == b''  # closed by the server after its read timeout
    finally:
        silent.close()


def test_tls_settings_are_checked_up_front(pki, tmp_path):
    assert TlsSettings.from_config(None) is None
    assert TlsSettings.from_config(dict(cert_file=None, key_file=None, ca_file=None)) is None
    assert tls_problems(dict(cert_file=pki.cert_file)) == [
        "system.tls.key_file: required when system.tls is set (give all of ['cert_file', 'key_file', 'ca_file'])",
        "system.tls.ca_file: required when system.tls is set (give all of ['cert_file', 'key_file', 'ca_file'])",
    ]
    assert tls_problems(dict(pki.tls_section(), certfile='x'))[0].startswith('system.tls.certfile: unknown key')
    missing = tls_problems(dict(pki.tls_section(), ca_file=str(tmp_path / 'nope.pem')))
    assert missing == [f'system.tls.ca_file: cannot read {tmp_path / "nope.pem"}: No such file or directory']
    open_key = tmp_path / 'open.key'
    open_key.write_bytes(open(pki.key_file, 'rb').read())
    os.chmod(open_key, 0o644)
    problems = tls_problems(dict(pki.tls_section(), key_file=str(open_key)))
    assert problems == [f'system.tls.key_file: key file {open_key} is readable by other users (mode 644); chmod 600 it']
    mismatched = tls_problems(dict(pki.tls_section(), cert_file=pki.ca_file))
    assert mismatched and 'do not load as a certificate and its key' in mismatched[0]
    with pytest.raises(ValueError, match='system.tls.key_file: required'):
        TlsSettings.from_config(dict(cert_file=pki.cert_file, ca_file=pki.ca_file))
    assert isinstance(TlsSettings.from_config(pki.tls_section()).client_context(), ssl.SSLContext)


def test_a_certificate_must_name_the_address_dialled(make_master, make_slave, tls):
    # The certificate names 127.0.0.1 and localhost; the same slave dialled as 127.0.0.2 is refused.
    slave = make_slave(host='0.0.0.0', secret=SECRET, tls=tls)
    master = make_master(secret=SECRET, tls=tls)
    with pytest.raises(requests.ConnectionError, match="doesn't match|mismatch|not valid for"):
        master.new_connection('by-ip', '127.0.0.2', slave.port).connect()
    assert not slave.is_connected
    master.new_connection('by-name', 'localhost', slave.port).connect()
    assert slave.is_connected
