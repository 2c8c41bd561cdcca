"""The replay service's call token: an HMAC of the run secret (``ding.interaction.base.auth``), sent in the
``ding-replay-token`` metadata of every call and compared with ``hmac.compare_digest`` before the server
parses the message. The secret itself never crosses the network."""

from __future__ import annotations

import hashlib
import hmac

from ding.interaction.base.auth import check_secret

TOKEN_METADATA = 'ding-replay-token'


def replay_token(secret: str) -> str:
    """The token every replay call carries, derived from the run secret."""
    secret = check_secret(secret, 'the replay service')
    return hmac.new(secret.encode(), b'ding.replay.v1 token', hashlib.sha256).hexdigest()


def token_matches(expected: str, metadata: object) -> bool:
    """Whether the call's ``metadata`` (gRPC's ``(key, value)`` pairs) holds the token ``expected``."""
    if not isinstance(metadata, (list, tuple)):
        return False
    for pair in metadata:
        key, value = pair[0], pair[1]
        if key == TOKEN_METADATA and isinstance(value, str):
            return hmac.compare_digest(value.encode(), expected.encode())
    return False


__all__ = ['TOKEN_METADATA', 'replay_token', 'token_matches']
