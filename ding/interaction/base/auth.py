"""The run secret and the proofs built from it: a master proves it holds the secret on ``POST /connect`` (an
HMAC over a fresh nonce, a time and the slave's port, so a proof seen by one listener is useless on another
port or later), and the slave answers with an HMAC over the same nonce and the token it chose, which shows the
master it reached a slave of its own run and not a process squatting the port. The secret itself never
crosses the network."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Mapping

# Where a worker process finds the run secret (the pipeline sets it for the workers it starts; on another
# host the user sets it, or names a file with ``system.secret_file``).
RUN_SECRET_ENV = 'DING_RUN_SECRET'
# The request header carrying a master's proof: ``Ding-HMAC <nonce>:<unix time>:<hex mac>``.
AUTH_HEADER = 'Authorization'
AUTH_SCHEME = 'Ding-HMAC'
# A proof older or newer than this (seconds, clocks of two hosts included) is refused.
PROOF_MAX_AGE = 300.0
MIN_SECRET_CHARS = 16
_HEADER_RE = re.compile(r'^Ding-HMAC ([0-9a-f]{32,128}):([0-9]{1,12}):([0-9a-f]{64})$')


class AuthError(Exception):
    """A connect proof is missing (``missing``) or wrong; the message never holds the secret."""

    def __init__(self, message: str, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def new_run_secret() -> str:
    """A fresh secret for one run (256 random bits, hex)."""
    return secrets.token_hex(32)


def check_secret(secret: str, source: str) -> str:
    """``secret`` stripped; ``ValueError`` naming ``source`` (never the secret) when it is too short."""
    secret = secret.strip()
    if len(secret) < MIN_SECRET_CHARS or not secret.isprintable():
        raise ValueError(f'the run secret from {source} must be at least {MIN_SECRET_CHARS} printable characters')
    return secret


def read_secret_file(path: str) -> str:
    """The secret held in ``path``; refused when the file can be read by group or others (it must be 0600)."""
    try:
        with open(path, encoding='utf-8') as f:
            mode = os.fstat(f.fileno()).st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ValueError(
                    f'secret file {path} is readable by other users (mode {stat.S_IMODE(mode):o}); chmod 600 it'
                )
            text = f.read(4096)
    except OSError as exc:
        raise ValueError(f'cannot read secret file {path}: {exc.strerror}') from None
    return check_secret(text, f'file {path}')


def resolve_run_secret(secret_file: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The run secret from ``secret_file`` when given, else from ``$DING_RUN_SECRET``; None when neither."""
    if secret_file:
        return read_secret_file(os.path.expanduser(str(secret_file)))
    value = (os.environ if environ is None else environ).get(RUN_SECRET_ENV)
    return check_secret(value, f'${RUN_SECRET_ENV}') if value else None


def _mac(secret: str, *parts: str) -> str:
    return hmac.new(secret.encode(), '\n'.join(parts).encode(), hashlib.sha256).hexdigest()


def connect_header(secret: str, port: int) -> tuple[str, str]:
    """``(header value, nonce)`` proving ``secret`` to the slave listening on ``port``."""
    nonce = secrets.token_hex(16)
    timestamp = str(int(time.time()))
    return f'{AUTH_SCHEME} {nonce}:{timestamp}:{_mac(secret, "connect", nonce, timestamp, str(port))}', nonce


def accept_proof(secret: str, nonce: str, slave_token: str) -> str:
    """The slave's answer to a connect: shows it holds the secret too, bound to the token it hands out."""
    return _mac(secret, 'accept', nonce, slave_token)


def check_accept_proof(secret: str, nonce: str, slave_token: str, proof: object) -> bool:
    return isinstance(proof, str) and hmac.compare_digest(proof, accept_proof(secret, nonce, slave_token))


class ConnectVerifier:
    """Checks the connect proofs a slave receives; each nonce is accepted once while its proof is fresh."""

    def __init__(self, secret: str) -> None:
        self._secret = check_secret(secret, "the slave's secret argument")
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def verify(self, header: str | None, port: int) -> str:
        """The nonce of a valid proof for ``port``; ``AuthError`` otherwise."""
        if not header:
            raise AuthError(f'Header "{AUTH_HEADER}: {AUTH_SCHEME} ..." is required to connect.', missing=True)
        match = _HEADER_RE.match(header)
        if match is None:
            raise AuthError(f'Header "{AUTH_HEADER}" is not a valid {AUTH_SCHEME} proof.')
        nonce, timestamp, mac = match.groups()
        expected = _mac(self._secret, 'connect', nonce, timestamp, str(port))
        if not hmac.compare_digest(mac, expected):
            raise AuthError("The connect proof does not match this run's secret.")
        now = time.time()
        if abs(now - int(timestamp)) > PROOF_MAX_AGE:
            raise AuthError(f'The connect proof is more than {PROOF_MAX_AGE:.0f} s old (or the clocks differ).')
        with self._lock:
            self._seen = {n: t for n, t in self._seen.items() if now - t <= 2 * PROOF_MAX_AGE}
            if nonce in self._seen:
                raise AuthError('The connect proof was used before.')
            self._seen[nonce] = now
        return nonce

    def accept_proof(self, nonce: str, slave_token: str) -> str:
        return accept_proof(self._secret, nonce, slave_token)


__all__ = [
    'RUN_SECRET_ENV',
    'AUTH_HEADER',
    'AuthError',
    'ConnectVerifier',
    'new_run_secret',
    'check_secret',
    'read_secret_file',
    'resolve_run_secret',
    'connect_header',
    'accept_proof',
    'check_accept_proof',
]
