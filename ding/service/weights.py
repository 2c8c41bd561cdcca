"""Policy weights over HTTP, server side: ``WeightsStore`` keeps the newest published snapshot for
``GET /weights/current`` (see ``ding.service.http``).

``WeightsStore.publish(state_dict, version)`` serialises a snapshot (on the training thread, so the HTTP
threads never read tensors that are being updated) through ``ding.utils.state_dict_codec``, the codec
checkpoints and policy files use too. Nested state dicts (``{'model': {'fc.weight': ...}}``) are stored
flat under ``'model/fc.weight'``.

The client side (``WeightsClient``, ``WeightsFollower``) lives below the workers, in
``ding.worker.collector.weights_client``; its names also load from here (on first use), where the docs name them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ding.utils.lazy_import import lazy_exports
from ding.utils.state_dict_codec import (
    WEIGHTS_FORMAT,
    WeightsError,
    deserialize_weights,
    flatten_state_dict,
    serialize_weights,
    sha256_hex,
    unflatten_state_dict,
)
from ding.utils.weights_http import CONTENT_TYPE, HEADER_SHA256, HEADER_VERSION, etag_matches, normalize_address
from ding.utils.weights_signing import SIGNATURE_SCHEME, check_run_id, sign_weights

FORMAT = WEIGHTS_FORMAT
# Announcements a stream can catch up on after a burst of publications (older ones are dropped).
ANNOUNCEMENTS_KEPT = 256

_LOG = logging.getLogger('ding.service.weights')

# The client side, where the docs name it; loaded on first use so the server side does not import the
# collectors package and requests.
_CLIENT = 'ding.worker.collector.weights_client'
__getattr__ = lazy_exports(
    __name__,
    dict.fromkeys(
        ('WeightsClient', 'WeightsFollower', 'check_compatible', 'check_policy_transport', 'POLICY_TRANSPORTS'), _CLIENT
    ),
)


# ---- server side ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PublishedWeights:
    """One published version: the bytes served and what identifies them."""

    version: int
    sha256: str
    payload: bytes
    time: float
    run_id: str = ''
    signature: str | None = None  # HMAC-SHA256 over (run_id, version, sha256); None: unsigned

    @property
    def size(self) -> int:
        return len(self.payload)

    @property
    def etag(self) -> str:
        return f'"{self.sha256}"'

    def meta(self) -> dict[str, Any]:
        return {
            'version': self.version,
            'sha256': self.sha256,
            'size': self.size,
            'time': self.time,
            'etag': self.etag,
            'format': FORMAT,
            'run_id': self.run_id,
            'signed': self.signature is not None,
            'signature': self.signature,
            'signature_scheme': SIGNATURE_SCHEME if self.signature is not None else None,
        }

    def announcement(self) -> dict[str, Any]:
        """What ``GET /weights/stream`` sends for this version: its identity and signature, not the tensors."""
        meta = self.meta()
        del meta['etag'], meta['format']
        return meta


class WeightsStore:
    """Holds the newest published weights for the HTTP server. Thread-safe.

    ``publish`` keeps the previous version when serialisation fails (collectors keep using it) and
    reports success/failure to the listeners ``(ok: bool, published: PublishedWeights | None, error)``.

    Publishing on demand: with ``latest_version`` (the learner's current iteration), ``fresh(timeout)``
    sets ``wanted`` when the stored version is older and waits for the training loop to publish
    (``PublishWeightsHook`` publishes at the next iteration when ``wanted`` is set), so weights are only
    serialised as often as someone asks for them.

    Signing: with ``signing_key`` (``ding.utils.weights_signing.weights_signing_key(run_secret)``) every
    version carries ``run_id`` and an HMAC-SHA256 over ``(run_id, version, sha256)``; without it versions
    are unsigned (clients then load them only when told to accept unsigned weights).

    Streams: ``wait_announcements(seq, timeout)`` blocks until a publication after ``seq`` (each publication
    increments ``seq``) or ``wake()`` and returns the announcements of the versions published since (the
    last ``ANNOUNCEMENTS_KEPT``); ``GET /weights/stream`` is built on it.
    """

    def __init__(
        self,
        latest_version: Callable[[], int] | None = None,
        run_id: str = '',
        signing_key: bytes | None = None,
    ) -> None:
        self._cond = threading.Condition()
        self._current: PublishedWeights | None = None
        self._seq = 0
        self._announcements: deque[tuple[int, dict[str, Any]]] = deque(maxlen=ANNOUNCEMENTS_KEPT)
        self.run_id = check_run_id(run_id) if run_id else ''
        self._signing_key = signing_key
        self._listeners: list[Callable[[bool, PublishedWeights | None, str | None], None]] = []
        self.failures = 0
        self.latest_version = latest_version
        self.wanted = False  # read by the training thread every iteration, without the lock

    def add_listener(self, listener: Callable[[bool, PublishedWeights | None, str | None], None]) -> None:
        self._listeners.append(listener)

    def publish(self, state_dict: Mapping[str, Any], version: int) -> PublishedWeights | None:
        """Serialise ``state_dict`` as ``version``; returns it, or None when it could not be serialised."""
        try:
            payload = serialize_weights(state_dict, version)
        except Exception as exc:  # keep serving the last good version; training goes on
            self.failures += 1
            _LOG.error('weights: cannot publish version %s: %s', version, exc)
            for listener in self._listeners:
                listener(False, None, str(exc))
            return None
        sha = sha256_hex(payload)
        signature = sign_weights(self._signing_key, self.run_id, int(version), sha) if self._signing_key else None
        published = PublishedWeights(int(version), sha, payload, time.time(), self.run_id, signature)
        with self._cond:
            self._current = published
            self._seq += 1
            self._announcements.append((self._seq, published.announcement()))
            self.wanted = False
            self._cond.notify_all()
        for listener in self._listeners:
            listener(True, published, None)
        return published

    @property
    def signed(self) -> bool:
        return self._signing_key is not None

    def current(self) -> PublishedWeights | None:
        with self._cond:
            return self._current

    def wait_announcements(self, seq: int, timeout: float) -> tuple[int, list[dict[str, Any]]]:
        """``(seq now, announcements published after seq)``, waiting up to ``timeout`` s (or a ``wake()``)
        for one; ``seq < 0`` (a new subscriber): the current version's only."""
        with self._cond:
            if seq < 0:
                current = self._current
                return self._seq, [current.announcement()] if current is not None else []
            if self._seq == seq:
                self._cond.wait(timeout)
            return self._seq, [a for s, a in self._announcements if s > seq]

    def wake(self) -> None:
        """Wake every ``wait_next`` (a server that stops ends its streams this way)."""
        with self._cond:
            self._cond.notify_all()

    def fresh(self, timeout: float) -> PublishedWeights | None:
        """The current weights, after asking the loop for those of its latest iteration if they are older
        (waits up to ``timeout`` s; a paused or busy loop leaves the stored version)."""
        latest_fn = self.latest_version
        if latest_fn is None or timeout <= 0:
            return self.current()
        latest = latest_fn()
        with self._cond:
            if self._current is not None and self._current.version >= latest:
                return self._current
            self.wanted = True
            self._cond.wait_for(lambda: self._current is not None and self._current.version >= latest, timeout)
            return self._current


__all__ = [
    'WeightsStore',
    'PublishedWeights',
    'WeightsError',
    'serialize_weights',
    'deserialize_weights',
    'flatten_state_dict',
    'unflatten_state_dict',
    'etag_matches',
    'normalize_address',
    'HEADER_VERSION',
    'HEADER_SHA256',
    'CONTENT_TYPE',
    'FORMAT',
    'sha256_hex',
]
