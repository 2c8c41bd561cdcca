"""The collector's side of ``/weights/*``: fetch a learner's published weights and keep a policy on them.

``WeightsClient(address).fetch(if_none_match=sha)`` returns ``(state_dict, version, sha)`` or None (not
modified, or any failure: then ``client.last_error`` says why). The payload's sha256 is checked against the
``X-Weights-SHA256`` header (and an expected value when given) before it is parsed; safetensors parsing never
unpickles. ``WeightsFollower`` keeps a policy on the newest good weights and leaves it untouched on any failure.
The server side (``WeightsStore``, the endpoint) is ``ding.service``'s.

Signatures: a client given ``signing_key`` (``weights_signing_key(run_secret)``) loads only versions whose
HMAC over ``(run_id, version, sha256)`` matches, checked before the payload is parsed. A client without the
key cannot verify anything and loads nothing unless built with ``accept_unsigned=True`` (then it loads
signed and unsigned versions alike, on the sha256 check only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import requests
import torch

from ding.utils.state_dict_codec import WeightsError, deserialize_weights, sha256_hex
from ding.utils.weights_http import HEADER_SHA256, HEADER_VERSION, etag_matches, normalize_address
from ding.utils.weights_signing import HEADER_RUN_ID, HEADER_SIGNATURE, signature_matches

from .weights_stream import WeightsSubscription

POLICY_TRANSPORTS = ('fs', 'http')

_LOG = logging.getLogger('ding.service.weights')  # the name users configure; unchanged since the client moved here


def check_policy_transport(value: Any, where: str = 'policy_transport') -> str:
    """``'fs'`` or ``'http'``; ``ValueError`` naming ``where`` otherwise."""
    if value not in POLICY_TRANSPORTS:
        raise ValueError(f'{where} must be one of {list(POLICY_TRANSPORTS)}, got {value!r}')
    return value


def state_dict_mismatch(reference: dict[str, Any], state: Any) -> str | None:
    """Why ``state`` cannot replace ``reference`` (a model state dict) in place; None when it can.

    ``load_state_dict`` copies tensor by tensor and raises only at the end, so a file with the right keys but
    one wrong shape would leave the model half-overwritten: check everything first.
    """
    if not isinstance(state, dict):
        return f'expected a dict of tensors, got {type(state).__name__}'
    missing = [k for k in reference if k not in state]
    unexpected = [k for k in state if k not in reference]
    if missing or unexpected:
        return f'keys differ from the model (missing {missing[:5]}, unexpected {unexpected[:5]})'
    for key, ref in reference.items():
        value = state[key]
        shape = getattr(value, 'shape', None)
        if shape is None:
            return f"'{key}' is a {type(value).__name__}, not a tensor"
        if tuple(shape) != tuple(ref.shape):
            return f"'{key}' has shape {tuple(shape)}, the model expects {tuple(ref.shape)}"
    return None


class WeightsClient:
    """Fetches weights from a learner's ``/weights/*`` endpoints.

    ``fetch`` never raises for network or integrity problems: it returns None and sets ``last_error``
    (``last_status`` is ``'ok'``, ``'not_modified'`` or ``'error'``), so a collector simply keeps the
    weights it has.

    ``signing_key``: verify each version's signature (see the module doc); ``run_id``: also refuse versions of
    another run. ``verify_failures`` counts versions refused for their integrity (sha256, signature, run id);
    ``fetches`` the ``/weights/current`` requests made. ``token``: the run's token (``/weights/stream``).
    """

    def __init__(
        self,
        address: str,
        timeout: float = 10.0,
        token: str | None = None,
        signing_key: bytes | None = None,
        accept_unsigned: bool = False,
        run_id: str | None = None,
    ) -> None:
        self.base_url = normalize_address(address)
        self.timeout = float(timeout)
        self.token = token
        self._session = requests.Session()
        self._session.trust_env = False  # peers are addressed directly, never through an environment proxy
        if token:
            self._session.headers['Authorization'] = f'Bearer {token}'
        self.signing_key = signing_key
        self.accept_unsigned = bool(accept_unsigned)
        self.run_id = run_id
        self.last_error: str | None = None
        self.last_status: str | None = None
        self.last_run_id: str | None = None
        self.verify_failures = 0
        self.fetches = 0

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> WeightsClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _fail(self, message: str) -> None:
        self.last_status, self.last_error = 'error', message
        _LOG.warning('weights: %s', message)

    def refuse(self, message: str) -> None:
        """Record an integrity failure (counted in ``verify_failures``)."""
        self.verify_failures += 1
        self._fail(message)

    def authenticity_problem(self, run_id: str, version: int, sha256: str, signature: str | None) -> str | None:
        """Why a version ``(run_id, version, sha256)`` with ``signature`` must not be loaded; None when it may."""
        if self.run_id is not None and run_id != self.run_id:
            return f'run id {run_id!r} is not the expected {self.run_id!r}'
        if self.signing_key is None:
            if self.accept_unsigned:
                return None
            what = 'signed' if signature else 'unsigned'
            return f'{what} weights and no signing key to verify them (give the run secret, or accept_unsigned=True)'
        if not signature:
            return 'the weights are not signed and this client verifies signatures'
        if not signature_matches(self.signing_key, run_id, version, sha256, signature):
            return f'signature of version {version} does not match (wrong key, or tampered run id / version / sha256)'
        return None

    def subscribe(
        self, keepalive_timeout: float = 60.0, backoff: tuple[float, float] = (0.5, 10.0)
    ) -> WeightsSubscription:
        """A started ``WeightsSubscription`` to this server's ``/weights/stream`` (needs ``token``)."""
        subscription = WeightsSubscription(
            self.base_url + '/weights/stream', self.token, keepalive_timeout=keepalive_timeout, backoff=backoff
        )
        subscription.start()
        return subscription

    def meta(self) -> dict[str, Any] | None:
        """``/weights/meta`` (version, sha256, size, time), or None on failure (see ``last_error``)."""
        try:
            response = self._session.get(self.base_url + '/weights/meta', timeout=self.timeout)
            body = response.json()
        except (requests.RequestException, ValueError) as exc:
            self._fail(f'GET {self.base_url}/weights/meta failed: {exc}')
            return None
        if response.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get('data'), dict):
            self._fail(
                f'GET {self.base_url}/weights/meta answered {response.status_code}: '
                f'{body.get("message") if isinstance(body, dict) else body!r}'
            )
            return None
        self.last_status, self.last_error = 'ok', None
        return body['data']

    def fetch(
        self, if_none_match: str | None = None, expected_sha256: str | None = None
    ) -> tuple[dict[str, Any], int, str] | None:
        """``(state_dict, version, sha256)`` of the current weights, or None.

        None when the server's weights still have sha ``if_none_match`` (HTTP 304) or on any failure
        (unreachable, not published yet, bad headers, sha256 mismatch, malformed payload).
        """
        url = self.base_url + '/weights/current'
        headers = {'If-None-Match': f'"{if_none_match}"'} if if_none_match else {}
        self.fetches += 1
        try:
            response = self._session.get(url, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            self._fail(f'GET {url} failed: {exc}')
            return None
        if response.status_code == 304:
            self.last_status, self.last_error = 'not_modified', None
            return None
        if response.status_code != 200:
            self._fail(f'GET {url} answered HTTP {response.status_code}: {response.text[:200]!r}')
            return None
        payload = response.content
        claimed = (response.headers.get(HEADER_SHA256) or '').strip().lower()
        version_text = response.headers.get(HEADER_VERSION)
        try:
            version = int(version_text or '')
        except (TypeError, ValueError):
            self._fail(f'GET {url}: header {HEADER_VERSION} is {version_text!r}, not an integer')
            return None
        actual = sha256_hex(payload)
        if not claimed:
            self._fail(f'GET {url}: no {HEADER_SHA256} header; refusing unverifiable weights')
            return None
        if actual != claimed:
            self.refuse(f'GET {url}: sha256 of the payload is {actual}, header says {claimed}; weights refused')
            return None
        if expected_sha256 and actual != expected_sha256.lower():
            self.refuse(f'GET {url}: sha256 {actual} is not the expected {expected_sha256}; weights refused')
            return None
        etag = response.headers.get('ETag')
        if etag and not etag_matches(etag, actual):
            self.refuse(f'GET {url}: ETag {etag} does not match the payload sha256 {actual}; weights refused')
            return None
        run_id = response.headers.get(HEADER_RUN_ID) or ''
        # Before the payload is parsed: bytes nobody signed are never handed to the deserialiser.
        problem = self.authenticity_problem(run_id, version, actual, response.headers.get(HEADER_SIGNATURE))
        if problem is not None:
            self.refuse(f'GET {url}: {problem}; weights refused')
            return None
        try:
            state_dict, meta = deserialize_weights(payload)
        except WeightsError as exc:
            self._fail(f'GET {url}: {exc}')
            return None
        if meta.get('version') != str(version):
            self._fail(f'GET {url}: payload version {meta.get("version")!r} differs from header {version}')
            return None
        self.last_status, self.last_error, self.last_run_id = 'ok', None, run_id
        return state_dict, version, actual


def check_compatible(reference: Mapping[str, Any], new: Mapping[str, Any], where: str = '') -> str | None:
    """Why ``new`` cannot replace ``reference`` (different keys, shapes or dtypes), or None."""
    ref_keys, new_keys = set(reference), set(new)
    if ref_keys != new_keys:
        missing, extra = sorted(ref_keys - new_keys), sorted(new_keys - ref_keys)
        return f'{where or "<root>"}: keys differ (missing {missing[:5]}, unexpected {extra[:5]})'
    for key in sorted(ref_keys):
        a, b = reference[key], new[key]
        path = f'{where}/{key}' if where else key
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            problem = check_compatible(a, b, path)
            if problem:
                return problem
        elif isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return f'{path}: expected {tuple(a.shape)} {a.dtype}, got {tuple(b.shape)} {b.dtype}'
        elif isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return f'{path}: tensor and non-tensor'
    return None


class WeightsFollower:
    """Keeps a policy mode (``collect_mode`` / ``eval_mode``) on the newest good weights of a learner.

    ``sync()`` fetches only when the server's sha differs from the loaded one, checks the new weights
    have the same keys, shapes and dtypes as the policy's, then loads them. On any failure (unreachable,
    bad sha256 or signature, an older version of the loaded run replayed, incompatible tensors) the policy
    keeps its last good weights and ``sync()`` returns False.

    ``subscribe=True``: instead of asking the server at every ``sync()``, listen to ``/weights/stream``
    (the client needs the run's token); while the stream is up ``sync()`` fetches only after an announcement
    of a version not loaded yet (while it is not, it polls), and ``wait(timeout)`` blocks until one comes. ``skipped_versions`` counts announced versions
    that were never loaded because a newer one superseded them first. ``close()`` ends the stream.
    """

    def __init__(
        self,
        client: WeightsClient,
        policy: Any,
        subscribe: bool = False,
        keepalive_timeout: float = 60.0,
        backoff: tuple[float, float] = (0.5, 10.0),
    ) -> None:
        self.client = client
        self.policy = policy
        self.version: int | None = None
        self.sha256: str | None = None
        self.run_id: str | None = None
        self.last_error: str | None = None
        self.skipped_versions = 0
        self.loads = 0
        self._pending: set[int] = set()
        self.subscription: WeightsSubscription | None = None
        if subscribe:
            if not client.token:
                raise ValueError(
                    "WeightsFollower(subscribe=True): the client needs the run's token for /weights/stream"
                )
            self.subscription = client.subscribe(keepalive_timeout=keepalive_timeout, backoff=backoff)

    def close(self) -> None:
        if self.subscription is not None:
            self.subscription.close()

    def wait(self, timeout: float) -> bool:
        """Subscribe mode: block until a version other than the loaded one is announced (True), or ``timeout``."""
        if self.subscription is None:
            raise RuntimeError('WeightsFollower.wait needs subscribe=True')
        return self.subscription.wait_for_change(self.sha256, timeout) is not None

    def stats(self) -> dict[str, Any]:
        """Numbers to log or export per actor."""
        sub = self.subscription
        return {
            'version': self.version,
            'loads': self.loads,
            'skipped_versions': self.skipped_versions,
            'verify_failures': self.client.verify_failures,
            'fetches': self.client.fetches,
            'stream_connected': sub.connected if sub is not None else None,
            'stream_connects': sub.connects if sub is not None else None,
        }

    def sync(self) -> bool:
        """True when new weights were loaded."""
        sub = self.subscription
        if sub is not None:
            self._pending.update(sub.take_announced())
            latest = sub.latest
            # While the stream is not up (starting, or reconnecting) this polls, so a fresh follower loads the
            # current weights at once and a dropped stream delays nothing; once up, only announcements fetch.
            if sub.connected and (latest is None or latest.get('sha256') == self.sha256):
                self.last_error = None
                return False
        got = self.client.fetch(if_none_match=self.sha256)
        if got is None:
            self.last_error = self.client.last_error
            return False
        state_dict, version, sha = got
        run_id = self.client.last_run_id
        if self.version is not None and run_id == self.run_id and version <= self.version:
            # A validly signed but older version of the same run: a replay, or a stale server answer.
            self.last_error = f'weights version {version} is not newer than the loaded {self.version}; refused'
            self.client.refuse(self.last_error)
            return False
        current = self.policy.state_dict()
        missing = sorted(k for k in state_dict if k not in current)
        problem: str | None
        if missing:
            problem = f'the policy has no {missing}'
        else:
            problem = check_compatible({k: current[k] for k in state_dict}, state_dict)
        if problem:
            self.last_error = f'weights version {version} do not fit the policy: {problem}'
            _LOG.warning('weights: %s', self.last_error)
            return False
        try:
            self.policy.load_state_dict(state_dict)
        except Exception as exc:  # shapes were checked; anything else is reported, not fatal
            self.last_error = f'loading weights version {version} failed: {exc}'
            _LOG.warning('weights: %s', self.last_error)
            return False
        if self.version is not None and run_id != self.run_id:
            self._pending = {v for v in self._pending if v >= version}  # another run's versions: not comparable
        self.skipped_versions += sum(1 for v in self._pending if v < version)
        self._pending = {v for v in self._pending if v > version}
        self.version, self.sha256, self.run_id, self.last_error = version, sha, run_id, None
        self.loads += 1
        return True


__all__ = [
    'state_dict_mismatch',
    'WeightsClient',
    'WeightsFollower',
    'check_compatible',
    'check_policy_transport',
    'POLICY_TRANSPORTS',
]
