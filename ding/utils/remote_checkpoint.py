"""Checkpoints stored under a ``ckpt_uri`` (local path, ``s3://``, ``gs://``): layout, upload, pruning, download.

Layout under the URI::

    checkpoints/<key>/<name>.manifest.json   the checkpoint's own manifest (sha256 of the plain data file)
    checkpoints/<key>/shard-00000[.zst]      the data file, cut into shards of ``shard_mb`` (zstd-compressed
    checkpoints/<key>/shard-00001[.zst]      each, when configured), uploaded and downloaded concurrently
    MANIFEST.json                            every stored checkpoint: URIs, sizes, checksums, versions, the
                                             config snapshot and the replay cursor of each
    latest                                   JSON naming the newest checkpoint (written last: the commit)

A checkpoint's objects are written (and verified) before MANIFEST.json lists it and before ``latest`` points at
it, so a reader that follows ``latest`` never finds a partial checkpoint. Pruning (after ``latest``) deletes the
checkpoint folders MANIFEST.json does not list.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .atomic_file import write_atomic
from .checkpoint import CHECKPOINT_FORMAT_VERSION, CheckpointError, verify_checkpoint
from .checkpoint_settings import CheckpointSettings
from .file_names import manifest_path
from .jsonable import to_jsonable
from .object_store import ObjectStore

MANIFEST_NAME = 'MANIFEST.json'
LATEST_NAME = 'latest'
REMOTE_FORMAT_VERSION = 1
BEST = 'best'
PERIODIC = 'periodic'


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def checkpoint_key(name: str, iteration: int) -> str:
    """The folder of a checkpoint: its name when that names the iteration, else ``{name}-{iteration}`` (a best
    checkpoint is rewritten under one name; each version gets its own folder, the old one is pruned)."""
    return name if name == f'iteration_{iteration}' else f'{name}-{iteration}'


def _compressor(settings: CheckpointSettings) -> tuple[Callable[[bytes], bytes], str]:
    if settings.compression != 'zstd':
        return (lambda b: b), ''
    import zstandard  # optional: the 'zstd' extra (checked when the config is validated)

    level = settings.compression_level

    def compress(data: bytes) -> bytes:
        return zstandard.ZstdCompressor(level=level).compress(data)

    return compress, '.zst'


def _decompress(data: bytes, compression: str | None) -> bytes:
    if compression != 'zstd':
        return data
    try:
        import zstandard  # optional: the 'zstd' extra
    except ImportError:
        raise CheckpointError('the stored checkpoint is zstd-compressed: pip install "ding[zstd]"') from None
    return zstandard.ZstdDecompressor().decompress(data)


class RemoteCheckpoints:
    """The checkpoints of one run under ``settings.ckpt_uri``. Not thread-safe: one uploader thread uses it."""

    def __init__(self, settings: CheckpointSettings, store: ObjectStore | None = None) -> None:
        if settings.ckpt_uri is None:
            raise ValueError('RemoteCheckpoints: settings.ckpt_uri is None')
        self.settings = settings
        self.store = store or ObjectStore(settings.ckpt_uri, settings.storage_options)
        self._manifest: dict[str, Any] | None = None
        self.bytes_uploaded = 0

    # ---- upload --------------------------------------------------------------------------------------
    def upload(self, data_path: str, record: Mapping[str, Any]) -> dict[str, Any]:
        """Store the verified local checkpoint ``data_path`` (its manifest beside it); return its MANIFEST entry.

        ``record``: ``name``, ``iteration``, ``envstep``, ``kind`` (``'periodic'`` / ``'best'``), optional
        ``eval_return`` and ``replay_cursor``. Nothing is listed in MANIFEST.json yet (see ``commit``).
        """
        local_manifest = verify_checkpoint(data_path)  # a torn local file is never uploaded
        with open(data_path, 'rb') as f:
            data = f.read()
        with open(manifest_path(data_path), 'rb') as f:
            manifest_bytes = f.read()
        name, iteration = str(record['name']), int(record['iteration'])
        key = checkpoint_key(name, iteration)
        prefix = f'checkpoints/{key}'
        compress, suffix = _compressor(self.settings)
        step = self.settings.shard_bytes
        pieces = [data[i : i + step] for i in range(0, len(data), step)] or [b'']

        def put_shard(index: int) -> dict[str, Any]:
            stored = compress(pieces[index])
            shard = f'shard-{index:05d}{suffix}'
            self.store.put(f'{prefix}/{shard}', stored)
            return {
                'file': shard,
                'uri': self.store.uri_of(f'{prefix}/{shard}'),
                'size_bytes': len(stored),
                'sha256': hashlib.sha256(stored).hexdigest(),
            }

        with ThreadPoolExecutor(max_workers=self.settings.max_parallel, thread_name_prefix='ckpt-upload') as pool:
            shards = list(pool.map(put_shard, range(len(pieces))))
        manifest_name = os.path.basename(manifest_path(data_path))
        self.store.put(f'{prefix}/{manifest_name}', manifest_bytes)
        stored_bytes = sum(s['size_bytes'] for s in shards) + len(manifest_bytes)
        self.bytes_uploaded += stored_bytes
        entry = {
            'key': key,
            'name': name,
            'kind': record.get('kind', PERIODIC),
            'uri': self.store.uri_of(prefix),
            'file': os.path.basename(data_path),
            'manifest': manifest_name,
            'last_iter': iteration,
            'last_step': int(record.get('envstep') or 0),
            'sha256': local_manifest['sha256'],
            'size_bytes': local_manifest['size_bytes'],
            'stored_bytes': stored_bytes,
            'compression': self.settings.compression,
            'shards': shards,
            'format_version': local_manifest['format_version'],
            'uploaded': _now_iso(),
        }
        if record.get('eval_return') is not None:
            entry['eval_return'] = float(record['eval_return'])
        if record.get('replay_cursor') is not None:
            entry['replay_cursor'] = record['replay_cursor']
        return entry

    # ---- MANIFEST.json and latest --------------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        """The run's MANIFEST.json as stored (an empty one before the first commit)."""
        if self._manifest is None:
            raw = self.store.get_or_none(MANIFEST_NAME)
            self._manifest = json.loads(raw) if raw else {'checkpoints': []}
        return self._manifest

    def commit(self, entry: dict[str, Any], run_info: Mapping[str, Any]) -> list[str]:
        """List ``entry`` in MANIFEST.json, point ``latest`` at it (periodic ones), prune; return the pruned keys."""
        manifest = dict(self.manifest())
        entries = [e for e in manifest.get('checkpoints', []) if e.get('key') != entry['key']]
        entries.append(entry)
        kept = self._keep(entries)
        newest = max((e for e in kept if e['kind'] != BEST), key=lambda e: e['last_iter'], default=entry)
        best = max((e for e in kept if e['kind'] == BEST), key=lambda e: e['last_iter'], default=None)
        manifest.update(
            {
                'format_version': REMOTE_FORMAT_VERSION,
                'checkpoint_format_version': CHECKPOINT_FORMAT_VERSION,
                'updated': _now_iso(),
                **dict(run_info),
                'latest': newest['key'],
                'best': best['key'] if best else None,
                'checkpoints': sorted(kept, key=lambda e: (e['last_iter'], e['key'])),
            }
        )
        self.store.put(MANIFEST_NAME, _json_bytes(manifest))
        self._manifest = manifest
        latest = {
            'checkpoint': newest['key'],
            'uri': newest['uri'],
            'last_iter': newest['last_iter'],
            'last_step': newest['last_step'],
            'manifest': self.store.uri_of(MANIFEST_NAME),
            'updated': manifest['updated'],
        }
        self.store.put(LATEST_NAME, _json_bytes(latest))
        # What MANIFEST.json no longer lists, and what it never listed: the objects of an upload that failed
        # half-way or of a checkpoint skipped during an outage (one uploader writes a URI: nothing else is in flight).
        listed = {e['key'] for e in kept}
        pruned = [k for k in self.store.folders('checkpoints') if k not in listed]
        for key in pruned:
            self.store.delete(f'checkpoints/{key}')
        return pruned

    def _keep(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        regular = sorted((e for e in entries if e['kind'] != BEST), key=lambda e: e['last_iter'])
        bests = sorted((e for e in entries if e['kind'] == BEST), key=lambda e: e['last_iter'])
        return regular[-self.settings.keep_n :] + (bests[-1:] if self.settings.keep_best else [])

    # ---- download ------------------------------------------------------------------------------------
    def latest_entry(self) -> dict[str, Any] | None:
        """The MANIFEST entry ``latest`` points at (None when nothing was stored yet)."""
        raw = self.store.get_or_none(LATEST_NAME)
        if raw is None:
            return None
        key = json.loads(raw)['checkpoint']
        self._manifest = None
        for e in self.manifest().get('checkpoints', []):
            if e.get('key') == key:
                return e
        raise CheckpointError(f'{self.store.uri_of(LATEST_NAME)} names {key!r}, which {MANIFEST_NAME} does not list')

    def download(self, entry: Mapping[str, Any], directory: str) -> str:
        """Fetch ``entry``'s shards concurrently into ``directory`` as a local checkpoint; verify; return its path."""
        prefix = f'checkpoints/{entry["key"]}'
        shards = list(entry['shards'])

        def fetch(shard: Mapping[str, Any]) -> bytes:
            stored = self.store.get(f'{prefix}/{shard["file"]}')
            if len(stored) != shard['size_bytes'] or hashlib.sha256(stored).hexdigest() != shard['sha256']:
                raise CheckpointError(f'{shard["uri"]}: size or sha256 differs from {MANIFEST_NAME}; corrupt')
            return _decompress(stored, entry.get('compression'))

        with ThreadPoolExecutor(max_workers=self.settings.max_parallel, thread_name_prefix='ckpt-download') as pool:
            data = b''.join(pool.map(fetch, shards))
        manifest_bytes = self.store.get(f'{prefix}/{entry["manifest"]}')
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, entry['file'])
        write_atomic(path, data)
        write_atomic(manifest_path(path), manifest_bytes)  # last: the local pair is complete only now
        verify_checkpoint(path)
        return path


def _json_bytes(obj: Any) -> bytes:
    text = json.dumps(to_jsonable(obj, 'repr', finite=True), indent=1, sort_keys=True, allow_nan=False)
    return (text + '\n').encode('utf-8')


def fetch_if_newer(settings: CheckpointSettings, directory: str, than_iter: int = -1) -> dict[str, Any] | None:
    """The checkpoint ``latest`` names under ``settings.ckpt_uri``, downloaded into ``directory`` when its iteration
    is above ``than_iter``: its MANIFEST entry plus ``path`` (the local file); None when nothing newer is stored.
    Raises ``ObjectStoreError`` / ``CheckpointError`` naming the URI."""
    remote = RemoteCheckpoints(settings)
    entry = remote.latest_entry()
    if entry is None or entry['last_iter'] <= than_iter:
        return None
    t0 = time.perf_counter()
    path = remote.download(entry, directory)
    return dict(entry, path=path, download_seconds=round(time.perf_counter() - t0, 4))


__all__ = ['RemoteCheckpoints', 'fetch_if_newer', 'checkpoint_key', 'MANIFEST_NAME', 'LATEST_NAME', 'BEST', 'PERIODIC']
