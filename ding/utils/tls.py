"""TLS for the HTTP servers and clients of a run (``system.tls``): the certificate, key and CA files checked up
front, and the server and client ``ssl.SSLContext`` built from them. Standard library only, so that the config
checks (``ding.config.system``) and the interaction layer share one definition.

A server presents ``cert_file`` / ``key_file``; a client trusts only the certificates ``ca_file`` signed and
checks that the one it is shown names the host it dialled (a subjectAltName DNS name or IP address).
"""

from __future__ import annotations

import os
import ssl
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The keys of ``system.tls``; all three are required once the section sets any of them.
TLS_KEYS = ('cert_file', 'key_file', 'ca_file')


@dataclass(frozen=True)
class TlsSettings:
    """Paths of this process's certificate chain (``cert_file``), its private key (``key_file``, 0600) and the CA
    certificate that signed every peer's certificate (``ca_file``). Construct with ``from_config`` (checks)."""

    cert_file: str
    key_file: str
    ca_file: str

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None, where: str = 'system.tls') -> TlsSettings | None:
        """The settings of a ``system.tls`` section, None when it is absent or every key is None (plain HTTP).
        ``ValueError`` naming ``where`` and the key when a key is unknown or missing, or a file cannot be used."""
        problems = tls_problems(section, where)
        if problems:
            raise ValueError('; '.join(problems))
        if not section or all(section.get(key) is None for key in TLS_KEYS):
            return None
        paths = {key: os.path.abspath(os.path.expanduser(str(section[key]))) for key in TLS_KEYS}
        return cls(**paths)

    def server_context(self) -> ssl.SSLContext:
        """A server context presenting this certificate (TLS 1.2 or newer)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client context trusting ``ca_file`` only and checking the server's host name (TLS 1.2 or newer)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def tls_problems(section: Mapping[str, Any] | None, where: str = 'system.tls') -> list[str]:
    """Everything wrong with a ``system.tls`` section (empty when fine): unknown keys, a key missing while others
    are set, a file missing or unreadable, a key file other users may read, a certificate that does not load with
    its key or a CA file that is not a certificate."""
    if section is None:
        return []
    if not isinstance(section, Mapping):
        return [f'{where}: expected a dict of {list(TLS_KEYS)}, got {type(section).__name__}']
    problems = [f'{where}.{key}: unknown key; valid keys: {list(TLS_KEYS)}' for key in section if key not in TLS_KEYS]
    given = {key: section.get(key) for key in TLS_KEYS if section.get(key) is not None}
    if not given:
        return problems
    for key in TLS_KEYS:
        value = given.get(key)
        if value is None:
            problems.append(f'{where}.{key}: required when {where} is set (give all of {list(TLS_KEYS)})')
        elif not isinstance(value, (str, os.PathLike)):
            problems.append(f'{where}.{key}: expected a path string, got {type(value).__name__} {value!r}')
        else:
            problem = _file_problem(os.path.expanduser(str(value)), private=key == 'key_file')
            if problem:
                problems.append(f'{where}.{key}: {problem}')
    if problems:
        return problems
    cert, key, ca = (os.path.expanduser(str(given[k])) for k in TLS_KEYS)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        problems.append(
            f'{where}.cert_file / key_file: {cert} and {key} do not load as a certificate and its key ({exc})'
        )
    try:
        ssl.create_default_context(cafile=ca)
    except (ssl.SSLError, OSError) as exc:
        problems.append(f'{where}.ca_file: {ca} is not a PEM certificate ({exc})')
    return problems


def _file_problem(path: str, private: bool) -> str | None:
    """Why ``path`` cannot serve (None when it can); a ``private`` file must not be readable by group or others."""
    try:
        with open(path, 'rb') as f:
            mode = os.fstat(f.fileno()).st_mode
    except OSError as exc:
        return f'cannot read {path}: {exc.strerror}'
    if not stat.S_ISREG(mode):
        return f'{path} is not a regular file'
    if private and mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f'key file {path} is readable by other users (mode {stat.S_IMODE(mode):o}); chmod 600 it'
    return None


__all__ = ['TLS_KEYS', 'TlsSettings', 'tls_problems']
