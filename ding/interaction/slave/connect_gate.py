"""The slave's gate on ``/connect``: the master's proof of the run secret, checked before the request's body is
read; refused attempts are logged at most once every ``REFUSAL_LOG_SPAN`` seconds."""

import logging
import threading
import time

from flask import request

from ..base.auth import AUTH_HEADER, AuthError, ConnectVerifier
from ..base.envelope import ResponsibleException
from ..exception import SlaveErrorCode

logger = logging.getLogger(__name__)
# Seconds between two log lines about refused (unauthenticated) connects.
REFUSAL_LOG_SPAN = 10.0


class ConnectGate:
    """Checks the connect proofs of the run ``secret`` (None: any master is let in)."""

    def __init__(self, secret: str | None) -> None:
        self._verifier = ConnectVerifier(secret) if secret is not None else None
        self._refusals = 0
        self._refusal_logged_at = -REFUSAL_LOG_SPAN
        self._lock = threading.Lock()

    @property
    def requires_secret(self) -> bool:
        """Whether ``/connect`` needs a proof of the run secret."""
        return self._verifier is not None

    def check(self, port: int, slave: object) -> str | None:
        """The nonce of the master's connect proof (None without a secret); refuses before the body is read.

        Call it while serving the ``/connect`` request to the slave listening on ``port`` (``slave`` names it
        in the log)."""
        if self._verifier is None:
            return None
        try:
            return self._verifier.verify(request.headers.get(AUTH_HEADER), port)
        except AuthError as err:
            self._log_refusal(err, slave)
            code = SlaveErrorCode.MASTER_SECRET_NOT_GIVEN if err.missing else SlaveErrorCode.MASTER_SECRET_NOT_MATCH
            raise ResponsibleException(code, str(err)) from None

    def accept_proof(self, nonce: str, slave_token: str) -> str:
        """The slave's proof back, for the nonce ``check`` returned."""
        if self._verifier is None:
            raise RuntimeError('no connect proof to answer: this slave requires no secret')
        return self._verifier.accept_proof(nonce, slave_token)

    def _log_refusal(self, err: AuthError, slave: object) -> None:
        """A WARNING per refused connect, at most one every ``REFUSAL_LOG_SPAN`` s (a flood cannot fill the log)."""
        now = time.monotonic()
        with self._lock:
            self._refusals += 1
            if now - self._refusal_logged_at < REFUSAL_LOG_SPAN:
                return
            count, self._refusals, self._refusal_logged_at = self._refusals, 0, now
        logger.warning(
            'slave %s refused %d unauthenticated /connect request(s); the last from %s: %s',
            slave,
            count,
            request.remote_addr,
            err,
        )
