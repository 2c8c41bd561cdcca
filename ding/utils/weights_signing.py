"""Signed weights: an HMAC-SHA256 over ``(run_id, version, sha256)`` of each published weights version.

The key is derived from the run secret (``weights_signing_key``), so the secret itself is never used as a
MAC key nor sent anywhere; whoever holds the run secret can check that a version was published by a learner
of that run and that its bytes (through their sha256) are the ones the learner signed. Torch-free.
"""

from __future__ import annotations

import hashlib
import hmac

HEADER_RUN_ID = 'X-Weights-Run-Id'
HEADER_SIGNATURE = 'X-Weights-Signature'
SIGNATURE_SCHEME = 'hmac-sha256'
# Binds a derived key to this one use: a key for weights never verifies another protocol's MAC.
_KEY_PURPOSE = b'ding weights signing v1'
_STREAM_PURPOSE = b'ding weights stream v1'


def weights_signing_key(run_secret: str) -> bytes:
    """The key that signs a run's weights, derived from its run secret (an HMAC of a fixed purpose label)."""
    if not isinstance(run_secret, str) or not run_secret:
        raise ValueError('weights signing needs a non-empty run secret')
    return hmac.new(run_secret.encode(), _KEY_PURPOSE, hashlib.sha256).digest()


def weights_stream_token(run_secret: str) -> str:
    """A read-only credential for ``GET /weights/stream`` derived from the run secret: the run's actors hold the
    secret, not the service's control token, and this token grants nothing else."""
    if not isinstance(run_secret, str) or not run_secret:
        raise ValueError('a weights stream token needs a non-empty run secret')
    return hmac.new(run_secret.encode(), _STREAM_PURPOSE, hashlib.sha256).hexdigest()


def check_run_id(run_id: str) -> str:
    """``run_id`` when it can go in a header and a signed message (printable, no spaces); ``ValueError``."""
    if not isinstance(run_id, str) or not run_id.isprintable() or any(c.isspace() for c in run_id):
        raise ValueError(f'weights run_id must be printable text without spaces, got {run_id!r}')
    return run_id


def sign_weights(key: bytes, run_id: str, version: int, sha256: str) -> str:
    """The hex HMAC-SHA256 of one version's identity."""
    message = f'ding-weights\n{check_run_id(run_id)}\n{int(version)}\n{sha256.lower()}'.encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def signature_matches(key: bytes, run_id: str, version: int, sha256: str, signature: str | None) -> bool:
    """Whether ``signature`` signs ``(run_id, version, sha256)`` under ``key`` (constant-time comparison)."""
    if not signature:
        return False
    try:
        expected = sign_weights(key, run_id, version, sha256)
    except ValueError:
        return False
    return hmac.compare_digest(signature.strip().lower().encode(), expected.encode())


__all__ = [
    'HEADER_RUN_ID',
    'HEADER_SIGNATURE',
    'SIGNATURE_SCHEME',
    'weights_signing_key',
    'weights_stream_token',
    'check_run_id',
    'sign_weights',
    'signature_matches',
]
