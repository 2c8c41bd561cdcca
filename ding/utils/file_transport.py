"""Trajectories and policy weights passed between parallel workers through a shared directory.

Files are checkpoints (safetensors + manifest, see ``ding.utils.checkpoint``): written atomically,
sha256-verified on read, never unpickled. A sample is referenced by a ``data_id`` of the form
``'<file name>#<index>'`` relative to ``path_data``.
"""
from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .collate import default_collate
from .file_names import split_data_id  # noqa: F401 -- part of this module's API

POLICY_FILE_PREFIX = 'policy_'


def _to_columns(samples: List[Dict[str, Any]]) -> Dict[str, Any] | None:
    """Stack same-shaped tensors key by key: one tensor per key writes and reads far faster than many."""
    keys = samples[0].keys()
    if any(s.keys() != keys for s in samples):
        return None
    columns: Dict[str, Any] = {}
    for key in keys:
        values = [s[key] for s in samples]
        first = values[0]
        if isinstance(first, torch.Tensor) and all(
                isinstance(v, torch.Tensor) and v.shape == first.shape and v.dtype == first.dtype for v in values):
            columns[key] = torch.stack(values)
        else:
            columns[key] = values
    return columns


def save_samples(path_data: str, file_stem: str, samples: List[Dict[str, Any]]) -> List[str]:
    """Write ``samples`` as one file named ``file_stem`` in ``path_data``; return one data_id per sample."""
    if not samples:
        return []
    os.makedirs(path_data, exist_ok=True)
    columns = _to_columns(samples)
    state = {'columns': columns} if columns is not None else {'samples': samples}
    # no fsync: a sample file is read within seconds or not at all, and a torn one fails verification
    final = save_checkpoint(os.path.join(path_data, file_stem), state, durable=False)
    name = os.path.basename(final)
    return [f'{name}#{i}' for i in range(len(samples))]


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


# Tensor dtypes numpy shares memory with (``Tensor.numpy()``); others (bfloat16...) take the generic path.
_NUMPY_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                           torch.float32, torch.float64})


def _column_array(column: Any) -> Optional[np.ndarray]:
    """A numpy view of a file column for row gathers, or None where only the generic path fits.

    A tensor column shares its memory. A list column of python numbers becomes the array ``default_collate``
    would build for that list (bool if all bools, int64 if all ints, float32 if all real), so a gather gives
    the same batch; anything else (strings, dicts, mixed types) is None.
    """
    if isinstance(column, torch.Tensor):
        if column.dtype in _NUMPY_DTYPES and column.device.type == 'cpu' and not column.requires_grad:
            return column.numpy()
        return None
    if not column:
        return None
    first = column[0]
    if first.__class__ is bool:
        kind = np.bool_ if all(v.__class__ is bool for v in column) else None
    elif first.__class__ is int:
        kind = np.int64 if all(v.__class__ is int for v in column) else None
        if kind is None and all(v.__class__ in (int, float) for v in column):
            kind = np.float32
    elif first.__class__ is float:
        kind = np.float32 if all(v.__class__ in (int, float) for v in column) else None
    else:
        kind = None
    if kind is None:
        return None
    try:
        return np.array(column, dtype=kind)
    except (OverflowError, ValueError):
        return None


class _CachedFile:
    """One cached sample file: its columns (or its samples, when they could not be stacked)."""

    __slots__ = ('columns', 'samples', 'n', 'nbytes', '_arrays', '_packed')

    def __init__(self, columns: Optional[Dict[str, Any]], samples: Optional[List[Dict[str, Any]]], n: int,
                 nbytes: int) -> None:
        self.columns = columns
        self.samples = samples
        self.n = n
        self.nbytes = nbytes
        self._arrays: Optional[Dict[str, Optional[np.ndarray]]] = None
        self._packed: Optional[Tuple[tuple, np.ndarray]] = None

    def arrays(self) -> Dict[str, Optional[np.ndarray]]:
        """Numpy views of the columns, built on the first gather (see ``_column_array``)."""
        arrays = self._arrays
        if arrays is None:
            arrays = self._arrays = {k: _column_array(v) for k, v in self.columns.items()}
        return arrays

    def packed(self) -> Tuple[tuple, np.ndarray]:
        """``(layout, rows)``: the bytes of every numpy column of a sample side by side, one row per sample,
        so a gather copies one row per sample rather than one value per sample and key. ``layout`` holds
        ``(key, offset, nbytes, dtype, row shape)`` per column; files with equal layouts gather together."""
        packed = self._packed
        if packed is None:
            layout, blocks, offset = [], [], 0
            for key, array in self.arrays().items():
                if array is None or array.ndim == 0 or len(array) != self.n:
                    continue
                block = np.ascontiguousarray(array).reshape(self.n, -1).view(np.uint8)
                layout.append((key, offset, block.shape[1], array.dtype, array.shape[1:]))
                blocks.append(block)
                offset += block.shape[1]
            rows = np.concatenate(blocks, axis=1) if blocks else np.empty((self.n, 0), np.uint8)
            packed = self._packed = (tuple(layout), rows)
        return packed


class SampleReader:
    """Loads samples by data_id, caching the most recently read files.

    A replay buffer samples uniformly over every file it refers to, so a batch hits many files: the cache
    keeps whole files (as loaded: one stacked tensor per key, no per-sample objects) up to ``cache_bytes``
    of tensor data (and at most ``cache_files`` files), least recently used out first. A sample's dict is
    built on each read (views into the file's tensors); ``gather`` builds a whole collated batch instead.
    """

    def __init__(self, path_data: str, cache_files: int = 4096, cache_bytes: int = 256 * 1024 * 1024) -> None:
        self.path_data = path_data
        self._cache: 'OrderedDict[str, _CachedFile]' = OrderedDict()
        self._cache_files = cache_files
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def _file(self, name: str) -> _CachedFile:
        with self._lock:
            entry = self._cache.get(name)
            if entry is not None:
                self._cache.move_to_end(name)
                return entry
        state = load_checkpoint(os.path.join(self.path_data, name))
        if 'columns' in state:
            columns = state['columns']
            n = len(next(iter(columns.values()))) if columns else 0
            entry = _CachedFile(columns, None, n, _tensor_bytes(columns))
        else:
            samples = state['samples']
            entry = _CachedFile(None, samples, len(samples), _tensor_bytes(samples))
        with self._lock:
            old = self._cache.pop(name, None)
            if old is not None:
                self._cached_bytes -= old.nbytes
            self._cache[name] = entry
            self._cached_bytes += entry.nbytes
            while len(self._cache) > 1 and (len(self._cache) > self._cache_files
                                            or self._cached_bytes > self._cache_bytes):
                self._cached_bytes -= self._cache.popitem(last=False)[1].nbytes
        return entry

    def _grow(self, name: str, entry: _CachedFile, extra: int) -> None:
        """Count ``extra`` bytes more for a cached file (evicting others beyond the bound, never this one)."""
        with self._lock:
            if self._cache.get(name) is not entry:
                return
            entry.nbytes += extra
            self._cached_bytes += extra
            while len(self._cache) > 1 and self._cached_bytes > self._cache_bytes:
                oldest = next(iter(self._cache))
                if oldest == name:
                    break
                self._cached_bytes -= self._cache.pop(oldest).nbytes

    def cached(self, name: str) -> bool:
        """Whether the file ``name`` is in the cache (its reads need no disk access)."""
        return name in self._cache

    def read_file_samples(self, name: str, indices: List[int]) -> List[Optional[Dict[str, Any]]]:
        """The samples at ``indices`` of file ``name``, one cache lookup for all of them (a batch's hot path):
        new dicts the caller may add keys to; None for an index beyond the file's samples. Raises
        ``CheckpointError`` like ``read``."""
        entry = self._file(name)
        columns, n = entry.columns, entry.n
        if columns is not None:
            items = columns.items()
            return [{k: v[index] for k, v in items} if index < n else None for index in indices]
        samples = entry.samples
        return [dict(samples[index]) if index < n else None for index in indices]

    def num_samples(self, name: str) -> int:
        """How many samples file ``name`` holds (loading it into the cache); raises ``CheckpointError``."""
        return self._file(name).n

    def gather(self, rows: Sequence[Tuple[str, int]]) -> Optional[Dict[str, Any]]:
        """The samples at ``rows`` (``(file name, index)`` pairs, indices within their files) as one batch:
        what ``default_collate`` gives for their list of sample dicts, built column by column (no per-sample
        dicts: a batch of a uniform replay buffer touches a different file almost every row).

        Returns None when the samples cannot form one batch this way (a file stored as separate samples,
        files with different keys, or values that do not stack): read them with ``read_file_samples``.
        Raises ``CheckpointError`` like ``read`` and ``IndexError`` for an index beyond its file.
        """
        if not rows:
            return None
        files: Dict[str, _CachedFile] = {}
        for name, _ in rows:
            if name not in files:
                files[name] = self._file(name)
        entries = list(files.values())
        first = entries[0]
        if first.columns is None:
            return None
        keys = first.columns.keys()
        for entry in entries:
            if entry.columns is None or entry.columns.keys() != keys:
                return None
        for name, index in rows:
            if not 0 <= index < files[name].n:
                raise IndexError(f"data_id '{name}#{index}': file holds only {files[name].n} samples")
        batch: Dict[str, Any] = {}
        if first.n:
            packs = {}
            for name, entry in files.items():
                fresh = entry._packed is None
                packs[name] = entry.packed()
                if fresh:  # the packed rows (and arrays made from lists) count against the cache bound
                    columns = entry.columns
                    made = sum(a.nbytes for k, a in entry.arrays().items()
                               if a is not None and not isinstance(columns[k], torch.Tensor))
                    self._grow(name, entry, packs[name][1].nbytes + made)
            layout = packs[rows[0][0]][0]
            if layout and all(p[0] == layout for p in packs.values()):
                size = sum(column[2] for column in layout)
                out = np.empty((len(rows), size), dtype=np.uint8)
                for j, (name, index) in enumerate(rows):
                    out[j] = packs[name][1][index]
                for key, offset, nbytes, dtype, shape in layout:
                    column = out[:, offset:offset + nbytes].copy().view(dtype).reshape((len(rows), ) + shape)
                    batch[key] = torch.from_numpy(column)
        file_arrays = {name: entry.arrays() for name, entry in files.items()}
        for key in keys:
            if key in batch:
                continue
            # Fast path: every file has a numpy view of this column with one dtype and row shape.
            ref = file_arrays[rows[0][0]][key]
            if ref is not None:
                dtype, shape = ref.dtype, ref.shape[1:]
                for arrays in file_arrays.values():
                    a = arrays[key]
                    if a is None or a.dtype != dtype or a.shape[1:] != shape:
                        ref = None
                        break
            if ref is not None:
                out = np.empty((len(rows), ) + shape, dtype=dtype)
                for j, (name, index) in enumerate(rows):
                    out[j] = file_arrays[name][key][index]
                batch[key] = torch.from_numpy(out)
                continue
            try:
                batch[key] = default_collate([files[name].columns[key][index] for name, index in rows])
            except (ValueError, OverflowError):  # e.g. tensors of different shapes: read one by one, the
                # policy collates only the keys it uses
                return None
        return batch

    def read(self, data_id: str) -> Dict[str, Any]:
        """Return the sample; raises ``CheckpointError`` (missing / corrupt file) or ``ValueError`` (bad id)."""
        name, index = split_data_id(data_id)
        entry = self._file(name)
        if index >= entry.n:
            raise ValueError(f"data_id '{data_id}': file holds only {entry.n} samples")
        if entry.columns is not None:
            return {k: v[index] for k, v in entry.columns.items()}
        return entry.samples[index]


def save_policy(path_policy: str, name: str, state_dict: Dict[str, Any], policy_iter: int) -> str:
    """Publish weights as ``{path_policy}/{name}.safetensors``; readers see the old or the new file, never half.
    Not fsynced: the file is replaced every fraction of a second, and the learner re-publishes after a restart."""
    os.makedirs(path_policy, exist_ok=True)
    return save_checkpoint(os.path.join(path_policy, name), {'model': state_dict, 'policy_iter': policy_iter,
                                                             'last_iter': policy_iter}, durable=False)


def load_policy(path: str) -> Tuple[Dict[str, Any], int]:
    """Return ``(model_state_dict, policy_iter)``; raises ``CheckpointError`` naming the file when bad."""
    state = load_checkpoint(path)
    return state['model'], int(state.get('policy_iter', state.get('last_iter', 0)))


_counter = itertools.count()


def unique_stem(prefix: str) -> str:
    """A file stem unique within this process and across processes (pid + counter)."""
    return f'{prefix}_{os.getpid()}_{next(_counter)}'


__all__ = ['save_samples', 'SampleReader', 'split_data_id', 'save_policy', 'load_policy', 'unique_stem',
           'CheckpointError']
