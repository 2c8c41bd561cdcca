"""Objects under one URI prefix: a local directory, ``s3://bucket/prefix`` or ``gs://bucket/prefix``.

``ObjectStore`` puts, verifies, reads, lists and deletes whole objects through fsspec (``s3fs`` for S3,
``gcsfs`` for Google Cloud Storage, fsspec's own local filesystem for a path). Credentials come from the
usual environment (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_PROFILE``,
``GOOGLE_APPLICATION_CREDENTIALS``); an S3-compatible server is named with ``AWS_ENDPOINT_URL`` or the
``endpoint_url`` storage option. Nothing here logs a credential or a storage option.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Mapping
from typing import Any

import fsspec

# URI scheme -> (fsspec protocol, the ding extra that installs its filesystem)
SCHEMES = {'s3': ('s3', 's3'), 's3a': ('s3', 's3'), 'gs': ('gcs', 'gcs'), 'gcs': ('gcs', 'gcs'), 'file': ('file', '')}
_MD5_ETAG = re.compile(r'^"?([0-9a-f]{32})"?$')
# The S3 client retries nothing by itself: the checkpoint uploader owns retries and backoff, and a dead
# endpoint must fail an attempt in seconds, not after the client's own minute of retries.
_S3_DEFAULTS: dict[str, Any] = {
    'config_kwargs': {'retries': {'max_attempts': 1}, 'connect_timeout': 5, 'read_timeout': 60},
}


class ObjectStoreError(OSError):
    """An object could not be written, verified, read or deleted; the message names the URI (never a credential)."""


def uri_scheme(uri: str) -> str:
    """``'s3'``, ``'gs'``, ... for a URL; ``'file'`` for a local path (with or without ``file://``)."""
    match = re.match(r'^([A-Za-z][A-Za-z0-9+.-]*)://', uri)
    return match.group(1).lower() if match else 'file'


def uri_problem(uri: Any) -> str | None:
    """Why ``uri`` cannot be a checkpoint location (None when it can)."""
    if not isinstance(uri, str) or not uri.strip():
        return f'expected a local path or an s3:// / gs:// URL, got {uri!r}'
    scheme = uri_scheme(uri)
    if scheme not in SCHEMES:
        return f'unsupported URL scheme {scheme!r} in {uri!r} (supported: a local path, file://, s3://, gs://)'
    if scheme != 'file' and not uri.split('://', 1)[1].strip('/'):
        return f'{uri!r} names no bucket'
    return None


def missing_extra(uri: str) -> str | None:
    """The message to show when the filesystem package of ``uri`` is not installed (None when it is)."""
    protocol, extra = SCHEMES.get(uri_scheme(uri), ('file', ''))
    if not extra:
        return None
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError:
        package = 's3fs' if extra == 's3' else 'gcsfs'
        return f'{uri!r} needs {package}: pip install "ding[{extra}]"'
    return None


class ObjectStore:
    """Whole objects under ``uri``; names are relative ('checkpoints/iteration_10/shard-00000')."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None = None) -> None:
        problem = uri_problem(uri)
        if problem:
            raise ValueError(f'object store: {problem}')
        missing = missing_extra(uri)
        if missing:
            raise ImportError(missing)
        scheme = uri_scheme(uri)
        protocol = SCHEMES[scheme][0]
        options = dict(storage_options or {})
        if protocol == 's3':
            options = {**_S3_DEFAULTS, **options}
            if not options.get('endpoint_url') and os.environ.get('AWS_ENDPOINT_URL'):
                options['endpoint_url'] = os.environ['AWS_ENDPOINT_URL']
        # A fresh filesystem object per store: fsspec's instance cache would share one across threads and tests.
        self.fs = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
        if protocol == 's3':
            self.fs.retries = 1  # s3fs's own retry loop (a class attribute, not an option)
        root = uri.split('://', 1)[1] if '://' in uri else uri
        if protocol == 'file':
            root = os.path.abspath(os.path.expanduser(root))
        self.root = root.rstrip('/')
        self.uri = uri.rstrip('/')
        self.protocol = protocol

    def path(self, name: str) -> str:
        return f'{self.root}/{name}' if name else self.root

    def uri_of(self, name: str) -> str:
        return f'{self.uri}/{name}'

    def put(self, name: str, data: bytes) -> None:
        """Write ``data`` as object ``name``, then check what the store holds (size, and its md5 or a re-read)."""
        target = self.path(name)
        try:
            if self.protocol == 'file':
                self.fs.makedirs(os.path.dirname(target), exist_ok=True)
            self.fs.pipe_file(target, data)
            info = self.fs.info(target)
        except Exception as exc:  # fsspec backends raise their clients' own error types
            raise ObjectStoreError(f'cannot write {self.uri_of(name)}: {_describe(exc)}') from exc
        problem = self._verify(name, data, info)
        if problem:
            raise ObjectStoreError(f'{self.uri_of(name)} failed verification after upload: {problem}')

    def _verify(self, name: str, data: bytes, info: Mapping[str, Any]) -> str | None:
        size = info.get('size')
        if size != len(data):
            return f'the store holds {size} bytes, {len(data)} were written'
        etag = _MD5_ETAG.match(str(info.get('ETag') or info.get('etag') or ''))
        if etag:  # S3 (single-part upload): the ETag is the md5 of the object
            want = hashlib.md5(data, usedforsecurity=False).hexdigest()
            return None if etag.group(1) == want else f'md5 {etag.group(1)} != {want}'
        md5_b64 = info.get('md5Hash')
        if isinstance(md5_b64, str):  # GCS
            want = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
            return None if md5_b64 == want else f'md5 {md5_b64} != {want}'
        stored = self.get(name)  # no checksum from the store: read the object back
        if hashlib.sha256(stored).digest() != hashlib.sha256(data).digest():
            return 'the object read back differs from the bytes written'
        return None

    def get(self, name: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self.path(name)))
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise ObjectStoreError(f'cannot read {self.uri_of(name)}: {_describe(exc)}') from exc

    def get_or_none(self, name: str) -> bytes | None:
        try:
            return self.get(name)
        except FileNotFoundError:
            return None

    def folders(self, name: str) -> list[str]:
        """Names of the sub-folders of folder ``name`` (none when it does not exist)."""
        try:
            entries = self.fs.ls(self.path(name), detail=True, refresh=True)  # never a cached listing
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise ObjectStoreError(f'cannot list {self.uri_of(name)}: {_describe(exc)}') from exc
        return sorted(e['name'].rstrip('/').rsplit('/', 1)[-1] for e in entries if e.get('type') == 'directory')

    def delete(self, name: str) -> None:
        """Delete object ``name`` or everything under the prefix ``name/``; nothing there is fine."""
        target = self.path(name)
        try:
            if self.fs.exists(target):
                self.fs.rm(target, recursive=True)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise ObjectStoreError(f'cannot delete {self.uri_of(name)}: {_describe(exc)}') from exc


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f'{type(exc).__name__}: {text}' if type(exc).__name__ not in text else text


__all__ = ['ObjectStore', 'ObjectStoreError', 'SCHEMES', 'uri_scheme', 'uri_problem', 'missing_extra']
