"""A throw-away PKI made with the ``openssl`` CLI, as a user would make one for a multi-host run (docs/security.md):
a CA, a server certificate it signs for 127.0.0.1 / localhost, and an unrelated CA that trusts nothing of ours."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Pki:
    ca_file: str
    cert_file: str
    key_file: str
    other_ca_file: str  # a CA that did not sign cert_file

    def tls_section(self, ca_file: str | None = None) -> dict[str, str]:
        """A ``system.tls`` section using these files (``ca_file`` replaces the trusted CA)."""
        return dict(cert_file=self.cert_file, key_file=self.key_file, ca_file=ca_file or self.ca_file)


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(['openssl', *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(directory: str, name: str) -> tuple[str, str]:
    key, cert = f'{name}.key', f'{name}.pem'
    _openssl(
        'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
        '-subj', f'/CN={name}', '-keyout', key, '-out', cert, cwd=directory,
    )  # fmt: skip
    return os.path.join(directory, key), os.path.join(directory, cert)


def make_pki(directory: str) -> Pki:
    """The files of a CA, a server certificate (SAN IP:127.0.0.1, DNS:localhost; key 0600) and another CA."""
    if shutil.which('openssl') is None:
        pytest.skip('the openssl command is not installed')
    ca_key, ca_cert = _make_ca(directory, 'run-ca')
    _, other_ca = _make_ca(directory, 'other-ca')
    with open(os.path.join(directory, 'san.ext'), 'w', encoding='utf-8') as f:
        f.write('subjectAltName=IP:127.0.0.1,DNS:localhost\n')
    _openssl(
        'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', '/CN=ding-worker',
        '-keyout', 'node.key', '-out', 'node.csr', cwd=directory,
    )  # fmt: skip
    _openssl(
        'x509', '-req', '-in', 'node.csr', '-CA', ca_cert, '-CAkey', ca_key, '-CAcreateserial', '-days', '2',
        '-extfile', 'san.ext', '-out', 'node.pem', cwd=directory,
    )  # fmt: skip
    key_file = os.path.join(directory, 'node.key')
    os.chmod(key_file, 0o600)
    return Pki(ca_cert, os.path.join(directory, 'node.pem'), key_file, other_ca)
