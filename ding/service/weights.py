"""Policy weights over HTTP: safetensors bytes with a version and a sha256, and the client that fetches them.

Server side: ``WeightsStore.publish(state_dict, version)`` serialises a snapshot (on the training thread,
so the HTTP threads never read tensors that are being updated) and keeps the newest one;
``GET /weights/current`` serves it (see ``ding.service.http``).

Client side: ``WeightsClient(address).fetch(if_none_match=sha)`` returns ``(state_dict, version, sha)``
or None (not modified, or any failure: then ``client.last_error`` says why). The payload's sha256 is
checked against the ``X-Weights-SHA256`` header (and an expected value when given) before it is parsed;
safetensors parsing never unpickles. ``WeightsFollower`` keeps a policy on the newest good weights and
leaves it untouched on any failure.

Nested state dicts (``{'model': {'fc.weight': ...}}``) are stored flat under ``'model/fc.weight'``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

HEADER_VERSION = 'X-Weights-Version'
HEADER_SHA256 = 'X-Weights-SHA256'
CONTENT_TYPE = 'application/octet-stream'
FORMAT = 'ding-weights-1'
POLICY_TRANSPORTS = ('fs', 'http')

_LOG = logging.getLogger('ding.service.weights')


class WeightsError(Exception):
    """Weights that cannot be served or used (malformed, corrupted, incompatible). The message says why."""


# ---- serialisation -------------------------------------------------------------------------------------
def flatten_state_dict(state: Mapping[str, Any], prefix: str = '') -> dict[str, torch.Tensor]:
    """``{'model': {'fc.weight': t}}`` -> ``{'model/fc.weight': t}``; every leaf must be a tensor."""
    flat: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if not isinstance(key, str) or not key or '/' in key:
            raise WeightsError(
                f"weights: key {key!r} under '{prefix or '<root>'}' must be a non-empty string without '/'"
            )
        name = prefix + key
        if isinstance(value, torch.Tensor):
            flat[name] = value
        elif isinstance(value, Mapping):
            flat.update(flatten_state_dict(value, name + '/'))
        else:
            raise WeightsError(
                f"weights: value at '{name}' is a {type(value).__name__}; only tensors "
                f'(in nested dicts) can be published'
            )
    return flat


def unflatten_state_dict(flat: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, tensor in flat.items():
        node = out
        *parents, leaf = name.split('/')
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise WeightsError(f"weights: '{name}' collides with a tensor of the same path")
            node = child
        node[leaf] = tensor
    return out


def serialize_weights(state_dict: Mapping[str, Any], version: int) -> bytes:
    """safetensors bytes of ``state_dict`` (a copy: later updates of the tensors do not show)."""
    import safetensors.torch as st

    flat = flatten_state_dict(state_dict)
    storages = set()
    tensors = {}
    for name, t in flat.items():
        t = t.detach()
        if t.device.type != 'cpu':
            t = t.cpu()
        if not t.is_contiguous():
            t = t.contiguous()
        if t.numel():
            # safetensors refuses tensors sharing memory (tied weights, views): give repeats their own copy.
            ptr = t.untyped_storage().data_ptr()
            if ptr in storages:
                t = t.clone()
            else:
                storages.add(ptr)
        tensors[name] = t
    return st.save(tensors, metadata={'format': FORMAT, 'version': str(int(version))})


def deserialize_weights(payload: bytes) -> tuple[dict[str, Any], dict[str, str]]:
    """``(state_dict, metadata)`` from safetensors bytes; ``WeightsError`` when they are not valid."""
    import safetensors.torch as st

    try:
        flat = st.load(bytes(payload))
        # load() does not return the header metadata; the header (8-byte little-endian length, then JSON)
        # was just validated by load(), so it is read here directly.
        (n,) = struct.unpack('<Q', payload[:8])
        meta = json.loads(payload[8 : 8 + n]).get('__metadata__') or {}
    except Exception as exc:  # the parser's error classes differ across safetensors versions
        raise WeightsError(f'weights: payload is not a valid safetensors file: {type(exc).__name__}: {exc}') from None
    if meta.get('format') != FORMAT:
        raise WeightsError(f'weights: payload format is {meta.get("format")!r}, expected {FORMAT!r}')
    return unflatten_state_dict(flat), meta


def sha256_hex(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


# ---- server side ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PublishedWeights:
    """One published version: the bytes served and what identifies them."""

    version: int
    sha256: str
    payload: bytes
    time: float

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
        }


class WeightsStore:
    """Holds the newest published weights for the HTTP server. Thread-safe.

    ``publish`` keeps the previous version when serialisation fails (collectors keep using it) and
    reports success/failure to the listeners ``(ok: bool, published: PublishedWeights | None, error)``.

    Publishing on demand: with ``latest_version`` (the learner's current iteration), ``fresh(timeout)``
    sets ``wanted`` when the stored version is older and waits for the training loop to publish
    (``PublishWeightsHook`` publishes at the next iteration when ``wanted`` is set), so weights are only
    serialised as often as someone asks for them.
    """

    def __init__(self, latest_version: Callable[[], int] | None = None) -> None:
        self._cond = threading.Condition()
        self._current: PublishedWeights | None = None
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
        published = PublishedWeights(int(version), sha256_hex(payload), payload, time.time())
        with self._cond:
            self._current = published
            self.wanted = False
            self._cond.notify_all()
        for listener in self._listeners:
            listener(True, published, None)
        return published

    def current(self) -> PublishedWeights | None:
        with self._cond:
            return self._current

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


def etag_matches(if_none_match: str | None, sha256: str) -> bool:
    """Whether an ``If-None-Match`` header names ``sha256`` (quoted or not, weak or not, in a list, or ``*``)."""
    if not if_none_match:
        return False
    for tag in if_none_match.split(','):
        tag = tag.strip()
        if tag == '*':
            return True
        if tag.startswith('W/'):
            tag = tag[2:]
        if tag.strip('"') == sha256:
            return True
    return False


def check_policy_transport(value: Any, where: str = 'policy_transport') -> str:
    """``'fs'`` or ``'http'``; ``ValueError`` naming ``where`` otherwise."""
    if value not in POLICY_TRANSPORTS:
        raise ValueError(f'{where} must be one of {list(POLICY_TRANSPORTS)}, got {value!r}')
    return value


# ---- client side ---------------------------------------------------------------------------------------
def normalize_address(address: str) -> str:
    """``'host:port'`` or ``'http://host:port'`` -> ``'http://host:port'`` (no trailing slash)."""
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f'address must be HOST:PORT or http://HOST:PORT, got {address!r}')
    address = address.strip().rstrip('/')
    if '://' not in address:
        address = 'http://' + address
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ('http', 'https') or not parts.hostname or port is None:
        raise ValueError(f'address must be HOST:PORT or http://HOST:PORT, got {address!r}')
    return address


class WeightsClient:
    """Fetches weights from a learner's ``/weights/*`` endpoints.

    ``fetch`` never raises for network or integrity problems: it returns None and sets ``last_error``
    (``last_status`` is ``'ok'``, ``'not_modified'`` or ``'error'``), so a collector simply keeps the
    weights it has.
    """

    def __init__(self, address: str, timeout: float = 10.0, token: str | None = None) -> None:
        import requests

        self.base_url = normalize_address(address)
        self.timeout = float(timeout)
        self._session = requests.Session()
        self._session.trust_env = False  # peers are addressed directly, never through an environment proxy
        if token:
            self._session.headers['Authorization'] = f'Bearer {token}'
        self.last_error: str | None = None
        self.last_status: str | None = None

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> WeightsClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _fail(self, message: str) -> None:
        self.last_status, self.last_error = 'error', message
        _LOG.warning('weights: %s', message)

    def meta(self) -> dict[str, Any] | None:
        """``/weights/meta`` (version, sha256, size, time), or None on failure (see ``last_error``)."""
        import requests

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
        import requests

        url = self.base_url + '/weights/current'
        headers = {'If-None-Match': f'"{if_none_match}"'} if if_none_match else {}
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
            version = int(version_text)
        except (TypeError, ValueError):
            self._fail(f'GET {url}: header {HEADER_VERSION} is {version_text!r}, not an integer')
            return None
        actual = sha256_hex(payload)
        if not claimed:
            self._fail(f'GET {url}: no {HEADER_SHA256} header; refusing unverifiable weights')
            return None
        if actual != claimed:
            self._fail(f'GET {url}: sha256 of the payload is {actual}, header says {claimed}; weights refused')
            return None
        if expected_sha256 and actual != expected_sha256.lower():
            self._fail(f'GET {url}: sha256 {actual} is not the expected {expected_sha256}; weights refused')
            return None
        etag = response.headers.get('ETag')
        if etag and not etag_matches(etag, actual):
            self._fail(f'GET {url}: ETag {etag} does not match the payload sha256 {actual}; weights refused')
            return None
        try:
            state_dict, meta = deserialize_weights(payload)
        except WeightsError as exc:
            self._fail(f'GET {url}: {exc}')
            return None
        if meta.get('version') != str(version):
            self._fail(f'GET {url}: payload version {meta.get("version")!r} differs from header {version}')
            return None
        self.last_status, self.last_error = 'ok', None
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
    have the same keys, shapes and dtypes as the policy's, then loads them. On any failure the policy
    keeps its last good weights and ``sync()`` returns False.
    """

    def __init__(self, client: WeightsClient, policy: Any) -> None:
        self.client = client
        self.policy = policy
        self.version: int | None = None
        self.sha256: str | None = None
        self.last_error: str | None = None

    def sync(self) -> bool:
        """True when new weights were loaded."""
        got = self.client.fetch(if_none_match=self.sha256)
        if got is None:
            self.last_error = self.client.last_error
            return False
        state_dict, version, sha = got
        current = self.policy.state_dict()
        missing = sorted(k for k in state_dict if k not in current)
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
        self.version, self.sha256, self.last_error = version, sha, None
        return True


__all__ = [
    'WeightsStore',
    'PublishedWeights',
    'WeightsClient',
    'WeightsFollower',
    'WeightsError',
    'serialize_weights',
    'deserialize_weights',
    'flatten_state_dict',
    'unflatten_state_dict',
    'etag_matches',
    'check_compatible',
    'check_policy_transport',
    'normalize_address',
    'HEADER_VERSION',
    'HEADER_SHA256',
    'POLICY_TRANSPORTS',
]
