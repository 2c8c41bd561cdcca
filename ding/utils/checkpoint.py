"""Checkpoint files: safetensors data + a JSON manifest, written atomically and verified on load.

Layout of one checkpoint ``iteration_100``::

    iteration_100.safetensors     every tensor of the state, under readable key paths ("model/fc.weight");
                                  the header metadata holds one JSON document ('ding_meta') with everything
                                  that is not a tensor plus the structure needed to rebuild the nested state
    iteration_100.manifest.json   sha256, size, tensor shapes/dtypes, last_iter, ... (written last)

A data file without its manifest is an incomplete save and is refused. Nothing here unpickles, except
DI-engine ``.pth.tar`` files, which go through ``torch.load(weights_only=True)`` only.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pickle
import re
import struct
import time
from typing import Any

import torch

from .atomic_file import fsync_dir, remove_quietly, write_temp
from .checkpoint_tree import CheckpointError, StateFlattener, StateUnflattener, as_int
from .file_names import MANIFEST_SUFFIX, SUFFIX, manifest_path
from .jsonable import exceeds_depth
from .rng_state import get_rng_state, set_rng_state
from .state_dict_codec import CodecError, decode_tensors, encode_tensors, read_metadata

CHECKPOINT_FORMAT_VERSION: int = 1
META_KEY = 'ding_meta'
# Deeper than any state ding writes (a model's state dict nests a few levels): a foreign or hostile file.
MAX_METADATA_DEPTH = 256
# Extensions of DI-engine (torch.save) checkpoints; these load through the weights-only unpickler.
TORCH_SUFFIXES = ('.pth.tar', '.pth', '.pt')
BEST_PREFIX = 'ckpt_best'

_MANIFEST_FIELDS = ('format_version', 'file', 'sha256', 'size_bytes', 'tensors')


# ----------------------------------------------------------------------------------------------- paths
def _data_path(path: str | os.PathLike) -> str:
    path = os.fspath(path)
    return path if path.endswith(SUFFIX) else path + SUFFIX


def _is_torch_file(path: str) -> bool:
    return path.endswith(TORCH_SUFFIXES)


# ---------------------------------------------------------------------------------------------- save
def _manifest_text(manifest: dict) -> str:
    # One field per line and one tensor per line: readable, and unlike json.dumps(indent=...) it keeps
    # the C encoder, which matters for files with thousands of small tensors (sample batches).
    lines = []
    for k, v in manifest.items():
        if k == 'tensors' and v:
            body = ',\n'.join(f'  {json.dumps(n)}: {json.dumps(t)}' for n, t in v.items())
            lines.append(f' {json.dumps(k)}: {{\n{body}\n }}')
        else:
            lines.append(f' {json.dumps(k)}: {json.dumps(v)}')
    return '{\n' + ',\n'.join(lines) + '\n}\n'


def _encode(state: dict, config_hash: str, origin: str) -> tuple[bytes, StateFlattener]:
    """``state`` as the bytes of a checkpoint data file (safetensors, the skeleton in its metadata)."""
    flat = StateFlattener()
    skeleton = flat.value(state, ())
    meta = {
        'format_version': CHECKPOINT_FORMAT_VERSION,
        'last_iter': as_int(state.get('last_iter')),
        'last_step': as_int(state.get('last_step')),
        'config_hash': config_hash,
        'state': skeleton,
    }
    try:
        meta_json = json.dumps(meta, separators=(',', ':'), allow_nan=False)
    except ValueError as e:  # cannot happen for values StateFlattener accepted; keep the message useful anyway
        raise TypeError(f'checkpoint {origin}: metadata is not JSON-serialisable: {e}') from e
    data = encode_tensors(flat.tensors, {META_KEY: meta_json, 'format_version': str(CHECKPOINT_FORMAT_VERSION)})
    return data, flat


def encode_state(state: dict) -> bytes:
    """``state`` (as ``save_checkpoint`` takes it) as bytes in the checkpoint format, for sending it whole (e.g.
    rank 0's learner state to the other ranks); ``decode_state`` reads them back. No pickle either way."""
    if not isinstance(state, dict):
        raise TypeError(f'encode_state: state must be a dict, got {type(state).__name__}')
    return _encode(state, '', '<in memory>')[0]


def save_checkpoint(path: str | os.PathLike, state: dict, config_hash: str = '', durable: bool = True) -> str:
    """Save ``state`` (nested dict of tensors / python values / objects with ``state_dict()``).

    ``'.safetensors'`` is appended to ``path`` when missing; the directory is created. The data file is
    written first and the manifest last, each through temp file + fsync + rename, so a crash never leaves
    a checkpoint that looks complete but is not. Returns the final ``.safetensors`` path.
    ``durable=False`` skips the fsyncs (the renames stay atomic for readers; a file torn by a machine crash
    fails verification on load): for files that are re-written every fraction of a second and worthless
    after a crash, such as published weights and sample files.
    Raises TypeError naming the key path of a value that cannot be stored.
    """
    if not isinstance(state, dict):
        raise TypeError(f'checkpoint: state must be a dict, got {type(state).__name__}')
    final = _data_path(path)
    directory = os.path.dirname(final) or '.'
    os.makedirs(directory, exist_ok=True)

    data, flat = _encode(state, config_hash, final)
    last_iter, last_step = as_int(state.get('last_iter')), as_int(state.get('last_step'))

    now = time.time()
    manifest = {
        'format_version': CHECKPOINT_FORMAT_VERSION,
        'file': os.path.basename(final),
        'sha256': hashlib.sha256(data).hexdigest(),
        'size_bytes': len(data),
        'tensors': {
            k: {'shape': list(t.shape), 'dtype': str(t.dtype).replace('torch.', '')} for k, t in flat.tensors.items()
        },
        'last_iter': last_iter,
        'last_step': last_step,
        'config_hash': config_hash,
        'wall_time': now,
        'created': datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(),
    }
    mpath = manifest_path(final)
    # Both files are staged (written and fsynced) before either is renamed into place, so a reader polling
    # an overwritten file (published weights, ckpt_best) sees old or new within two back-to-back renames;
    # a crash between the renames leaves new data beside the old manifest, which verification refuses.
    data_tmp = write_temp(final, data, durable)
    try:
        manifest_tmp = write_temp(mpath, _manifest_text(manifest).encode('utf-8'), durable)
    except BaseException:
        remove_quietly(data_tmp)
        raise
    try:
        os.replace(data_tmp, final)
        os.replace(manifest_tmp, mpath)
    except BaseException:
        remove_quietly(data_tmp)
        remove_quietly(manifest_tmp)
        raise
    if durable:
        fsync_dir(directory)
    return final


save_file = save_checkpoint


# ---------------------------------------------------------------------------------------------- load
def read_manifest(path: str | os.PathLike) -> dict:
    """Return the manifest of a checkpoint (path with or without '.safetensors', or the manifest path)."""
    path = os.fspath(path)
    mpath = manifest_path(path)
    try:
        with open(mpath, 'rb') as f:
            manifest = json.loads(f.read().decode('utf-8'))
    except FileNotFoundError:
        data = _data_path(path) if not path.endswith(MANIFEST_SUFFIX) else path
        if not path.endswith(MANIFEST_SUFFIX) and not os.path.exists(data):
            raise CheckpointError(f'checkpoint {data}: file not found') from None
        raise CheckpointError(
            f'checkpoint {data}: manifest missing ({mpath} not found); the save was incomplete'
        ) from None
    except RecursionError:
        raise CheckpointError(f'checkpoint manifest {mpath}: unreadable: JSON nested too deeply') from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f'checkpoint manifest {mpath}: unreadable: {e}') from e
    if not isinstance(manifest, dict) or any(k not in manifest for k in _MANIFEST_FIELDS):
        raise CheckpointError(
            'checkpoint manifest {}: missing fields (needs {})'.format(mpath, ', '.join(_MANIFEST_FIELDS))
        )
    if not isinstance(manifest['format_version'], int) or manifest['format_version'] > CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            'checkpoint manifest {}: format_version {!r} is newer than supported ({})'.format(
                mpath, manifest['format_version'], CHECKPOINT_FORMAT_VERSION
            )
        )
    return manifest


def _read_verified(path: str) -> tuple[bytes, dict]:
    """Read the data file once and check it against its manifest; returns (bytes, manifest)."""
    manifest = read_manifest(path)
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        raise CheckpointError(f'checkpoint {path}: data file missing (manifest {manifest_path(path)} exists)') from None
    except OSError as e:
        raise CheckpointError(f'checkpoint {path}: cannot read: {e}') from e
    if len(data) != manifest['size_bytes']:
        what = 'truncated' if len(data) < manifest['size_bytes'] else 'size mismatch'
        raise CheckpointError(
            'checkpoint {}: {} ({} bytes on disk, manifest says {})'.format(
                path, what, len(data), manifest['size_bytes']
            )
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest['sha256']:
        raise CheckpointError(
            'checkpoint {}: sha256 mismatch (file {}, manifest {}); the file is corrupt'.format(
                path, digest, manifest['sha256']
            )
        )
    return data, manifest


def _header_metadata(data: bytes, path: str) -> dict:
    try:
        return read_metadata(data)
    except RecursionError:
        raise CheckpointError(f'checkpoint {path}: unreadable safetensors header: nested too deeply') from None
    except (struct.error, ValueError, AttributeError) as e:
        raise CheckpointError(f'checkpoint {path}: unreadable safetensors header: {e}') from e


def _load_torch_file(path: str, map_location: Any) -> dict:
    if not os.path.isfile(path):
        raise CheckpointError(f'checkpoint {path}: file not found')
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f'checkpoint {path}: refused to load: it holds objects other than tensors, numbers, strings '
            f'and containers (only weights-only loading is allowed): {e}'
        ) from e
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise CheckpointError(f'checkpoint {path}: cannot read torch file (corrupt or truncated?): {e}') from e
    if not isinstance(obj, dict):
        raise CheckpointError(f'checkpoint {path}: expected a dict, found {type(obj).__name__}')
    return obj


def load_checkpoint(path: str | os.PathLike, map_location: Any = 'cpu') -> dict:
    """Load a checkpoint saved by :func:`save_checkpoint` (verified against its manifest), or a DI-engine
    ``.pth.tar``/``.pth``/``.pt`` file (weights-only unpickling). Tensors are moved to ``map_location``.

    Raises CheckpointError naming the path for missing, incomplete, corrupt or refused files.
    """
    path = os.fspath(path)
    if _is_torch_file(path):
        return _load_torch_file(path, map_location)
    path = _data_path(path)
    data, _ = _read_verified(path)
    return _decode(data, path, map_location)


def decode_state(data: bytes, origin: str, map_location: Any = 'cpu') -> dict:
    """The state ``encode_state`` wrote into ``data``; ``CheckpointError`` naming ``origin`` when it is not one."""
    return _decode(data, origin, map_location)


def _decode(data: bytes, path: str, map_location: Any) -> dict:
    meta_json = _header_metadata(data, path).get(META_KEY)
    if meta_json is None:
        raise CheckpointError(f'checkpoint {path}: no {META_KEY!r} metadata; not written by ding')
    try:
        meta = json.loads(meta_json)
        tensors, _ = decode_tensors(data)
    except RecursionError:  # only a foreign or hostile writer nests the metadata this deep
        raise CheckpointError(f'checkpoint {path}: {META_KEY!r} metadata is nested too deeply') from None
    except (CodecError, ValueError) as e:  # the sha matched, so only a foreign/buggy writer gets here
        raise CheckpointError(f'checkpoint {path}: cannot decode: {e}') from e
    # json's own recursion guard depends on the interpreter's recursion limit, which a library may raise
    if exceeds_depth(meta, MAX_METADATA_DEPTH):
        raise CheckpointError(f'checkpoint {path}: {META_KEY!r} metadata is nested too deeply')
    if not isinstance(meta, dict) or 'state' not in meta:
        raise CheckpointError(f'checkpoint {path}: {META_KEY!r} metadata has no state')
    if meta.get('format_version', 0) > CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            'checkpoint {}: format_version {} is newer than supported ({})'.format(
                path, meta.get('format_version'), CHECKPOINT_FORMAT_VERSION
            )
        )
    if map_location is not None and torch.device(map_location).type == 'cpu':
        map_location = None  # tensors are already on the host; skip needless .to() calls
    try:
        return StateUnflattener(tensors, map_location, path).node(meta['state'])
    except RecursionError:
        raise CheckpointError(f'checkpoint {path}: {META_KEY!r} metadata is nested too deeply') from None
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # malformed skeleton from a foreign writer
        raise CheckpointError(f'checkpoint {path}: malformed {META_KEY!r} metadata: {e!r}') from e


read_file = load_checkpoint


def verify_checkpoint(path: str | os.PathLike) -> dict:
    """Check a checkpoint's size and sha256 against its manifest; returns the manifest or raises CheckpointError."""
    path = os.fspath(path)
    if _is_torch_file(path):
        raise CheckpointError(f'checkpoint {path}: DI-engine torch files have no manifest; load it to check it')
    return _read_verified(_data_path(path))[1]


# ---------------------------------------------------------------------------------------- directories
def _periodic(directory: str, prefix: str) -> list[tuple[int, str]]:
    pattern = re.compile(re.escape(prefix) + r'(\d+)' + re.escape(SUFFIX) + '$')
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        m = pattern.match(name)
        if m and not name.startswith(BEST_PREFIX):
            found.append((int(m.group(1)), os.path.join(directory, name)))
    found.sort()
    return found


def list_checkpoints(directory: str | os.PathLike, prefix: str = 'iteration_') -> list[str]:
    """``{prefix}{n}.safetensors`` files in ``directory``, sorted by ``n`` ascending (complete or not)."""
    return [p for _, p in _periodic(os.fspath(directory), prefix)]


def latest_valid_checkpoint(directory: str | os.PathLike) -> str | None:
    """The newest checkpoint in ``directory`` (by manifest last_iter, then mtime) that verifies, or None.

    Every ``*.safetensors`` with a readable manifest is a candidate (``ckpt_best`` included); corrupt,
    truncated or incomplete ones are skipped.
    """
    directory = os.fspath(directory)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    candidates = []
    for name in names:
        if not name.endswith(SUFFIX) or name.startswith('.'):
            continue
        p = os.path.join(directory, name)
        try:
            manifest = read_manifest(p)
            mtime = os.path.getmtime(p)
        except (CheckpointError, OSError):
            continue
        it = manifest.get('last_iter')
        candidates.append((it if isinstance(it, int) else -1, mtime, p))
    for _, _, p in sorted(candidates, reverse=True):
        try:
            verify_checkpoint(p)
            return p
        except CheckpointError:
            continue
    return None


def prune_checkpoints(directory: str | os.PathLike, keep_n: int, prefix: str = 'iteration_') -> list[str]:
    """Delete all but the ``keep_n`` newest ``{prefix}{n}.safetensors`` (by ``n``) and their manifests.

    ``ckpt_best*`` files are never touched. Returns the deleted ``.safetensors`` paths.
    """
    if keep_n < 0:
        raise ValueError(f'prune_checkpoints: keep_n must be >= 0, got {keep_n}')
    found = list_checkpoints(directory, prefix)
    doomed = found[: max(len(found) - keep_n, 0)] if keep_n else found
    for p in doomed:
        # Manifest first: if we stop half-way the leftover data file reads as incomplete, never as valid.
        for f in (manifest_path(p), p):
            try:
                os.remove(f)
            except FileNotFoundError:
                pass
    return doomed


# ----------------------------------------------------------------------------------------------- misc
def _canonical(obj: Any) -> Any:
    # json's sort_keys cannot order mixed key types (int and str), so keys become strings first.
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    return obj


def config_hash(cfg: dict) -> str:
    """Stable sha256 hex digest of a config (keys sorted; non-JSON values through ``str``)."""
    text = json.dumps(_canonical(cfg), sort_keys=True, default=str, separators=(',', ':'))
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


__all__ = [
    'CHECKPOINT_FORMAT_VERSION',
    'CheckpointError',
    'save_checkpoint',
    'load_checkpoint',
    'read_manifest',
    'verify_checkpoint',
    'manifest_path',
    'list_checkpoints',
    'latest_valid_checkpoint',
    'prune_checkpoints',
    'get_rng_state',
    'set_rng_state',
    'config_hash',
    'save_file',
    'read_file',
]
