"""Checkpoint files: safetensors data + a JSON manifest, written atomically and verified on load.

Layout of one checkpoint ``iteration_100``::

    iteration_100.safetensors     every tensor of the state, under readable key paths ("model/fc.weight");
                                  the header metadata holds one JSON document ('ding_meta') with everything
                                  that is not a tensor plus the structure needed to rebuild the nested state
    iteration_100.manifest.json   sha256, size, tensor shapes/dtypes, last_iter, ... (written last)

A data file without its manifest is an incomplete save and is refused. Nothing here unpickles, except
DI-engine ``.pth.tar`` files, which go through ``torch.load(weights_only=True)`` only.
"""

import datetime
import hashlib
import json
import math
import os
import pickle
import random
import re
import struct
import time
from typing import Any

import numpy as np
import safetensors.torch as st
import torch

from .file_names import MANIFEST_SUFFIX, SUFFIX, manifest_path  # noqa: F401 -- part of this module's API

CHECKPOINT_FORMAT_VERSION: int = 1
META_KEY = 'ding_meta'
# Extensions of DI-engine (torch.save) checkpoints; these load through the weights-only unpickler.
TORCH_SUFFIXES = ('.pth.tar', '.pth', '.pt')
BEST_PREFIX = 'ckpt_best'

_MANIFEST_FIELDS = ('format_version', 'file', 'sha256', 'size_bytes', 'tensors')


class CheckpointError(Exception):
    """A checkpoint cannot be used (missing, incomplete, corrupt, refused). The message names the file."""


# ----------------------------------------------------------------------------------------------- paths
def _data_path(path: str | os.PathLike) -> str:
    path = os.fspath(path)
    return path if path.endswith(SUFFIX) else path + SUFFIX


def _is_torch_file(path: str) -> bool:
    return path.endswith(TORCH_SUFFIXES)


# ------------------------------------------------------------------------------------ atomic writing
def _fsync_dir(directory: str) -> None:
    # Makes the renames durable; some filesystems cannot open/fsync a directory, which is not fatal.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_temp(path: str, data: bytes, durable: bool = True) -> str:
    """Write ``data`` to a fresh temp file beside ``path`` (and fsync it when ``durable``); return the temp path."""
    directory = os.path.dirname(path) or '.'
    tmp = os.path.join(directory, f'.{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp')
    # os.open with 0o666 lets the umask decide permissions, like a plain open() would.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        _remove_quietly(tmp)
        raise
    return tmp


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


# ------------------------------------------------------------------------------ flatten / unflatten
# The JSON skeleton mirrors the state. Plain JSON scalars and arrays stand for themselves; every JSON
# object is a one-key tagged node, so no user value can be mistaken for structure:
#   {"$tensor": name} {"$ndarray": name} {"$bytes": name}  -> tensor stored in the file under `name`
#   {"$dict": {str: node}}          dict whose keys are all str (order kept)
#   {"$items": [[key, node], ...]}  dict with other keys (int, float, bool, None, tuple)
#   {"$tuple": [node, ...]}         tuple (torch optimizers keep betas as a tuple)
#   {"$float": "nan"|"inf"|"-inf"}  non-finite float (plain JSON has no spelling for them)


def _path_str(path: tuple) -> str:
    return '/'.join(str(k) for k in path) if path else '<root>'


class _Flattener:
    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._aliases: dict[tuple, str] = {}
        self._storages: set = set()
        # Tensors made on the fly (numpy/bytes wrappers, state_dict() results) must outlive the walk, or
        # their freed memory could be reused by a later tensor and wrongly match the alias lookup.
        self._alive: list[Any] = []

    def _unique_name(self, path: tuple) -> str:
        base = _path_str(path)
        name, i = base, 1
        # '__metadata__' is the header's own key in safetensors; '/' inside keys can make two paths
        # collide. The skeleton keeps the true structure, so renaming is harmless.
        while name in self.tensors or name == '__metadata__':
            name = f'{base}#{i}'
            i += 1
        return name

    def add_tensor(self, t: torch.Tensor, path: tuple) -> str:
        if t.layout != torch.strided:
            raise TypeError(
                f"checkpoint: sparse/non-strided tensor at key '{_path_str(path)}' is not supported; "
                'call .to_dense() first'
            )
        if t.dtype not in st._SIZE:
            raise TypeError(
                f"checkpoint: tensor dtype {t.dtype} at key '{_path_str(path)}' cannot be stored in safetensors"
            )
        if t.numel() == 0:
            # Its own (empty) storage: never 'shared', nothing to alias.
            name = self._unique_name(path)
            self.tensors[name] = torch.empty(t.shape, dtype=t.dtype, device=t.device)
            return name
        # Tied weights show up as distinct objects viewing the same memory (state_dict() detaches each
        # parameter anew): store them once and let the skeleton reference the name twice, like torch.save.
        alias = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        name = self._aliases.get(alias)
        if name is not None:
            return name
        self._alive.append(t)
        t = t.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        # safetensors refuses two tensors on one storage (e.g. two halves of one buffer): copy later ones.
        storage = (t.device, t.untyped_storage().data_ptr())
        if storage in self._storages:
            t = t.clone()
        else:
            self._storages.add(storage)
        name = self._unique_name(path)
        self.tensors[name] = t
        self._aliases[alias] = name
        return name

    def key(self, k: Any, path: tuple) -> Any:
        if k is None or isinstance(k, (bool, int, str)):
            return k
        if isinstance(k, float):
            return self.value(k, path)
        if isinstance(k, tuple):
            return {'$tuple': [self.key(x, path) for x in k]}
        raise TypeError(f"checkpoint: unsupported dict key type {type(k).__name__} under key '{_path_str(path)}'")

    def value(self, v: Any, path: tuple) -> Any:
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {'$float': repr(v)}
        if isinstance(v, torch.Tensor):
            return {'$tensor': self.add_tensor(v, path)}
        if isinstance(v, dict):
            if all(type(k) is str for k in v):
                return {'$dict': {k: self.value(x, path + (k,)) for k, x in v.items()}}
            return {'$items': [[self.key(k, path), self.value(x, path + (k,))] for k, x in v.items()]}
        if isinstance(v, list):
            return [self.value(x, path + (i,)) for i, x in enumerate(v)]
        if isinstance(v, tuple):
            return {'$tuple': [self.value(x, path + (i,)) for i, x in enumerate(v)]}
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                raise TypeError(f"checkpoint: numpy object array at key '{_path_str(path)}' is not supported")
            try:
                t = torch.from_numpy(np.ascontiguousarray(v))
            except TypeError as e:
                raise TypeError(f"checkpoint: numpy dtype {v.dtype} at key '{_path_str(path)}' is not supported") from e
            return {'$ndarray': self.add_tensor(t, path)}
        if isinstance(v, np.generic) and not isinstance(v, (np.str_, np.bytes_, np.void, np.object_)):
            return self.value(v.item(), path)  # numpy scalars come back as python numbers
        if isinstance(v, (bytes, bytearray)):
            return {'$bytes': self.add_tensor(torch.frombuffer(bytearray(v), dtype=torch.uint8), path)}
        state_dict = getattr(v, 'state_dict', None)
        if callable(state_dict):
            return self.value(state_dict(), path)
        raise TypeError(
            f"checkpoint: cannot store value of type {type(v).__qualname__} at key '{_path_str(path)}' (tensors, numbers, str, bool, None, "
            'dict/list/tuple, numpy arrays, bytes and objects with state_dict() are supported)'
        )


class _Unflattener:
    def __init__(self, tensors: dict[str, torch.Tensor], map_location: Any, file: str) -> None:
        self.tensors = tensors
        self.map_location = map_location
        self.file = file
        self._moved: dict[str, torch.Tensor] = {}

    def _stored(self, name: str) -> torch.Tensor:
        try:
            return self.tensors[name]
        except (KeyError, TypeError):
            msg = f'checkpoint {self.file}: metadata refers to missing tensor {name!r}'
            raise CheckpointError(msg) from None

    def _tensor(self, name: str) -> torch.Tensor:
        t = self._moved.get(name)
        if t is None:
            t = self._stored(name)
            if self.map_location is not None:
                t = t.to(self.map_location)
            self._moved[name] = t  # one object per stored name keeps tied tensors tied
        return t

    def node(self, n: Any) -> Any:
        if isinstance(n, list):
            return [self.node(x) for x in n]
        if not isinstance(n, dict):
            return n
        if len(n) != 1:
            raise CheckpointError(f'checkpoint {self.file}: malformed metadata node {n!r:.80}')
        ((tag, body),) = n.items()
        if tag == '$dict':
            return {k: self.node(x) for k, x in body.items()}
        if tag == '$items':
            return {self.node(k): self.node(x) for k, x in body}
        if tag == '$tuple':
            return tuple(self.node(x) for x in body)
        if tag == '$tensor':
            return self._tensor(body)
        if tag == '$ndarray':
            return self._stored(body).numpy()  # always host memory, whatever map_location says
        if tag == '$bytes':
            return self._stored(body).numpy().tobytes()
        if tag == '$float':
            return float(body)
        raise CheckpointError(f'checkpoint {self.file}: unknown metadata tag {tag!r}')


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_floating_point():
        return int(v.item())
    return None


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

    flat = _Flattener()
    skeleton = flat.value(state, ())
    last_iter, last_step = _as_int(state.get('last_iter')), _as_int(state.get('last_step'))
    meta = {
        'format_version': CHECKPOINT_FORMAT_VERSION,
        'last_iter': last_iter,
        'last_step': last_step,
        'config_hash': config_hash,
        'state': skeleton,
    }
    try:
        meta_json = json.dumps(meta, separators=(',', ':'), allow_nan=False)
    except ValueError as e:  # cannot happen for values _Flattener accepted; keep the message useful anyway
        raise TypeError(f'checkpoint {final}: metadata is not JSON-serialisable: {e}') from e
    data = st.save(flat.tensors, metadata={META_KEY: meta_json, 'format_version': str(CHECKPOINT_FORMAT_VERSION)})

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
    data_tmp = _write_temp(final, data, durable)
    try:
        manifest_tmp = _write_temp(mpath, _manifest_text(manifest).encode('utf-8'), durable)
    except BaseException:
        _remove_quietly(data_tmp)
        raise
    try:
        os.replace(data_tmp, final)
        os.replace(manifest_tmp, mpath)
    except BaseException:
        _remove_quietly(data_tmp)
        _remove_quietly(manifest_tmp)
        raise
    if durable:
        _fsync_dir(directory)
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
        raise CheckpointError(
            f'checkpoint {_data_path(path) if not path.endswith(MANIFEST_SUFFIX) else path}: manifest missing ({mpath} not found); the save was incomplete'
        ) from None
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
    # safetensors layout: u64 little-endian header length, then a JSON header holding '__metadata__'.
    try:
        (n,) = struct.unpack('<Q', data[:8])
        header = json.loads(data[8 : 8 + n].decode('utf-8'))
        return header.get('__metadata__') or {}
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
    meta_json = _header_metadata(data, path).get(META_KEY)
    if meta_json is None:
        raise CheckpointError(f'checkpoint {path}: no {META_KEY!r} metadata; not written by ding')
    try:
        meta = json.loads(meta_json)
        tensors = st.load(data)
    except Exception as e:  # the sha matched, so only a foreign/buggy writer gets here
        raise CheckpointError(f'checkpoint {path}: cannot decode: {e}') from e
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
        return _Unflattener(tensors, map_location, path).node(meta['state'])
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


# ------------------------------------------------------------------------------------------------ rng
def get_rng_state() -> dict:
    """States of python ``random``, numpy's global generator, torch CPU (and every CUDA device when
    available), as tensors and plain values that :func:`save_checkpoint` stores losslessly."""
    version, internal, gauss_next = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state = {
        'python': {'version': version, 'state': torch.tensor(internal, dtype=torch.int64), 'gauss_next': gauss_next},
        'numpy': {
            'bit_generator': np_state['bit_generator'],
            'key': torch.from_numpy(np_state['state']['key'].astype(np.int64)),
            'pos': int(np_state['state']['pos']),
            'has_gauss': int(np_state['has_gauss']),
            'gauss': float(np_state['gauss']),
        },
        'torch': torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def _to_host(t: Any) -> torch.Tensor:
    return t.cpu() if isinstance(t, torch.Tensor) else torch.as_tensor(t)


def set_rng_state(state: dict) -> None:
    """Restore what :func:`get_rng_state` returned (possibly after a save/load round trip)."""
    if 'python' in state:
        py = state['python']
        internal = tuple(int(x) for x in _to_host(py['state']).tolist())
        random.setstate((int(py['version']), internal, py['gauss_next']))
    if 'numpy' in state:
        n = state['numpy']
        key = _to_host(n['key']).numpy().astype(np.uint32)
        np.random.set_state((n['bit_generator'], key, int(n['pos']), int(n['has_gauss']), float(n['gauss'])))
    if 'torch' in state:
        torch.set_rng_state(_to_host(state['torch']).to(torch.uint8))
    if state.get('cuda') and torch.cuda.is_available():
        cuda_states = [_to_host(s).to(torch.uint8) for s in state['cuda']]
        # A different GPU count than at save time: restore the devices both runs have.
        for i, s in enumerate(cuda_states[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s, i)


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
