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
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .collate import default_collate
from .file_names import split_data_id  # noqa: F401 -- part of this module's API

POLICY_FILE_PREFIX = 'policy_'


def _to_columns(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Stack same-shaped tensors key by key: one tensor per key writes and reads far faster than many."""
    keys = samples[0].keys()
    if any(s.keys() != keys for s in samples):
        return None
    columns: dict[str, Any] = {}
    for key in keys:
        values = [s[key] for s in samples]
        first = values[0]
        if isinstance(first, torch.Tensor) and all(
            isinstance(v, torch.Tensor) and v.shape == first.shape and v.dtype == first.dtype for v in values
        ):
            columns[key] = torch.stack(values)
        else:
            columns[key] = values
    return columns


def save_samples(path_data: str, file_stem: str, samples: list[dict[str, Any]]) -> list[str]:
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
_NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
    }
)


def _column_array(column: Any) -> np.ndarray | None:
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


def _row_columns(arrays: dict[str, np.ndarray | None], n: int) -> dict[str, np.ndarray]:
    """The numpy columns of a file that hold one row per sample, the ones a ``_RowStore`` keeps."""
    return {key: array for key, array in arrays.items() if array is not None and array.ndim and len(array) == n}


class _CachedFile:
    """One cached sample file: its columns (or its samples, when they could not be stacked), and where its
    rows are in a ``_RowStore`` once a gather has stored them."""

    __slots__ = ('columns', 'samples', 'n', 'nbytes', '_arrays', 'store', 'base', 'storable')

    def __init__(
        self, columns: dict[str, Any] | None, samples: list[dict[str, Any]] | None, n: int, nbytes: int
    ) -> None:
        self.columns = columns
        self.samples = samples
        self.n = n
        self.nbytes = nbytes
        self._arrays: dict[str, np.ndarray | None] | None = None
        self.store: _RowStore | None = None  # set and cleared under SampleReader._lock
        self.base = 0  # the store row of this file's first sample
        self.storable = columns is not None  # False once found to have no column a store keeps

    def arrays(self) -> dict[str, np.ndarray | None]:
        """Numpy views of the columns, built on the first gather (see ``_column_array``)."""
        arrays = self._arrays
        if arrays is None:
            arrays = self._arrays = {k: _column_array(v) for k, v in self.columns.items()}
        return arrays

    def made_bytes(self) -> int:
        """Bytes of the arrays built from list columns (views of tensor columns cost nothing more)."""
        columns = self.columns
        return sum(
            a.nbytes for k, a in self.arrays().items() if a is not None and not isinstance(columns[k], torch.Tensor)
        )


class _RowStore:
    """The rows of all cached files of one layout, column by column in one array per key, so that a batch
    over many files is one ``take`` per key rather than a copy per row. A file's rows are appended once, at
    its ``base``; an evicted file's rows stay, dead, until they outnumber the live ones, then the arrays are
    rebuilt from the live files (so they hold at most ~4x the live rows: half dead, half spare capacity).
    Only touched under ``SampleReader._lock``; a rebuild makes new arrays, so a ``take`` is never torn."""

    __slots__ = ('key', 'columns', 'used', 'dead', 'files')

    def __init__(self, key: tuple, row_columns: dict[str, np.ndarray]) -> None:
        self.key = key
        self.columns = {k: np.empty((0,) + a.shape[1:], a.dtype) for k, a in row_columns.items()}
        self.used = 0  # rows in use, live or dead; beyond them is spare capacity
        self.dead = 0
        self.files: dict[_CachedFile, None] = {}  # the live files, in the order of their rows

    def capacity(self) -> int:
        return len(next(iter(self.columns.values())))

    def add(self, entry: _CachedFile, row_columns: dict[str, np.ndarray]) -> None:
        n = entry.n
        if self.used + n > self.capacity():  # doubling: appends cost amortised O(1) per row
            self._move_live_rows(max(2 * self.capacity(), self.used + n))
        for key, column in self.columns.items():
            column[self.used : self.used + n] = row_columns[key]
        entry.store, entry.base = self, self.used
        self.used += n
        self.files[entry] = None

    def remove(self, entry: _CachedFile) -> None:
        del self.files[entry]
        entry.store = None
        self.dead += entry.n
        if self.dead * 2 > self.used:
            self._move_live_rows(2 * (self.used - self.dead))

    def _move_live_rows(self, capacity: int) -> None:
        """Copy the live files' rows, packed together, into new arrays of ``capacity`` rows."""
        columns = {k: np.empty((capacity,) + a.shape[1:], a.dtype) for k, a in self.columns.items()}
        used = 0
        for entry in self.files:
            for key, column in columns.items():
                column[used : used + entry.n] = self.columns[key][entry.base : entry.base + entry.n]
            entry.base = used
            used += entry.n
        self.columns, self.used, self.dead = columns, used, 0


def _one_key_set(entries: Sequence[_CachedFile]) -> bool:
    """Whether every file is stored as columns, all with the same keys."""
    if entries[0].columns is None:
        return False
    keys = entries[0].columns.keys()
    return all(entry.columns is not None and entry.columns.keys() == keys for entry in entries)


def _index_error(name: str, index: int, n: int) -> IndexError:
    return IndexError(f"data_id '{name}#{index}': file holds only {n} samples")


def _check_indices(rows: Sequence[tuple[str, int]], files: dict[str, _CachedFile]) -> None:
    for name, index in rows:
        if not 0 <= index < files[name].n:
            raise _index_error(name, index, files[name].n)


class SampleReader:
    """Loads samples by data_id, caching the most recently read files.

    A replay buffer samples uniformly over every file it refers to, so a batch hits many files: the cache
    keeps whole files (as loaded: one stacked tensor per key, no per-sample objects) up to ``cache_bytes``
    of tensor data (and at most ``cache_files`` files), least recently used out first. A sample's dict is
    built on each read (views into the file's tensors); ``gather`` builds a whole collated batch instead,
    from copies of the files' columns kept per layout in one ``_RowStore`` (counted against ``cache_bytes``).
    """

    def __init__(self, path_data: str, cache_files: int = 4096, cache_bytes: int = 256 * 1024 * 1024) -> None:
        self.path_data = path_data
        self._cache: OrderedDict[str, _CachedFile] = OrderedDict()
        self._cache_files = cache_files
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0
        self._stores: dict[tuple, _RowStore] = {}  # by (layout, the keys it does not store)
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
            old = self._cache.get(name)
            if old is not None:
                self._evict(name)
            self._cache[name] = entry
            self._cached_bytes += entry.nbytes
            while len(self._cache) > 1 and (
                len(self._cache) > self._cache_files or self._cached_bytes > self._cache_bytes
            ):
                self._evict(next(iter(self._cache)))
        return entry

    def _evict(self, name: str) -> None:
        """Drop a cached file and free its place in the byte count and its rows in its store (under the lock)."""
        entry = self._cache.pop(name)
        self._cached_bytes -= entry.nbytes
        store = entry.store
        if store is not None:
            store.remove(entry)
            if not store.files:
                del self._stores[store.key]

    def _grow(self, name: str, entry: _CachedFile, extra: int) -> None:
        """Count ``extra`` bytes more for a cached file (evicting others beyond the bound, never this one)."""
        with self._lock:
            if self._cache.get(name) is entry:
                self._grow_locked(name, entry, extra)

    def _grow_locked(self, name: str, entry: _CachedFile, extra: int) -> None:
        entry.nbytes += extra
        self._cached_bytes += extra
        while len(self._cache) > 1 and self._cached_bytes > self._cache_bytes:
            oldest = next(iter(self._cache))
            if oldest == name:
                break
            self._evict(oldest)

    def cached(self, name: str) -> bool:
        """Whether the file ``name`` is in the cache (its reads need no disk access)."""
        return name in self._cache

    def read_file_samples(self, name: str, indices: list[int]) -> list[dict[str, Any] | None]:
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

    def gather(self, rows: Sequence[tuple[str, int]]) -> dict[str, Any] | None:
        """The samples at ``rows`` (``(file name, index)`` pairs, indices within their files) as one batch:
        what ``default_collate`` gives for their list of sample dicts, built column by column (no per-sample
        dicts: a batch of a uniform replay buffer touches a different file almost every row).

        Returns None when the samples cannot form one batch this way (a file stored as separate samples,
        files with different keys, or values that do not stack): read them with ``read_file_samples``.
        Raises ``CheckpointError`` like ``read`` and ``IndexError`` for an index beyond its file.
        """
        if not rows:
            return None
        names, indices = zip(*rows)
        unique = list(dict.fromkeys(names))
        which = np.fromiter(map(dict(zip(unique, range(len(unique)))).__getitem__, names), np.intp, len(names))
        return self.gather_indexed(unique, which, indices)

    def gather_indexed(self, unique: Sequence[str], which: np.ndarray, indices: Sequence[int]) -> dict[str, Any] | None:
        """``gather`` of the rows ``(unique[which[j]], indices[j])``: ``unique`` the distinct file names,
        ``which`` each row's position in it (an integer array), for a caller that has its rows in this form."""
        if not len(which):
            return None
        unique = list(unique)
        entries = self._entries(unique)
        batch = self._gather_stored(which, indices, unique, entries)
        if batch is not None and len(batch) == len(entries[0].columns):  # the usual case: every key stored
            return batch
        rows = list(zip(map(unique.__getitem__, which.tolist()), np.asarray(indices).tolist()))
        files = dict(zip(unique, entries))
        if batch is None:
            if not _one_key_set(entries):
                return None
            _check_indices(rows, files)
            batch = {}
        return self._collate_columns(rows, files, batch)

    def _entries(self, names: list[str]) -> list[_CachedFile]:
        """The cached files ``names`` (loading the missing ones), marked used: ``_file`` for each, with one
        lock acquisition for the usual batch of cached files."""
        with self._lock:
            entries = list(map(self._cache.get, names))
            for name, entry in zip(names, entries):
                if entry is not None:
                    self._cache.move_to_end(name)
        return [entry if entry is not None else self._file(name) for name, entry in zip(names, entries)]

    def _gather_stored(
        self, where: np.ndarray, indices: Sequence[int], unique: list[str], entries: list[_CachedFile]
    ) -> dict[str, torch.Tensor] | None:
        """The stored columns of the batch when all its files are in one row store (storing new files in
        theirs first), else None; ``where``: each row's file, as a position in ``unique``. Raises
        ``IndexError`` for an index beyond its file."""
        index_array = np.asarray(indices)
        if index_array.dtype.kind not in 'iu':  # not plain integers: the generic path treats them as before
            return None
        located = self._store_rows(unique, index_array, where, entries)
        if located is None:
            self._store_new(unique, entries)
            located = self._store_rows(unique, index_array, where, entries)
            if located is None:
                return None
        columns, store_rows = located
        # Outside the lock: appends write beyond these rows and a rebuild makes new arrays.
        return {key: torch.from_numpy(column.take(store_rows, axis=0)) for key, column in columns.items()}

    def _store_rows(
        self, unique: list[str], index_array: np.ndarray, where: np.ndarray, entries: list[_CachedFile]
    ) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
        """``(the store's columns, the batch's rows in them)`` if every file is in one store, else None;
        ``where`` is each row's file, as a position in ``entries``. Under the lock: evictions and rebuilds
        move stored rows."""
        with self._lock:
            store = entries[0].store
            if store is None or any(entry.store is not store for entry in entries):
                return None
            sizes = np.array([entry.n for entry in entries])[where]
            beyond = index_array.astype(np.uint64) >= sizes  # a negative index wraps round to a huge one
            if beyond.any():
                j = int(np.flatnonzero(beyond)[0])
                raise _index_error(unique[where[j]], int(index_array[j]), int(sizes[j]))
            bases = np.array([entry.base for entry in entries])[where]
            return store.columns, bases + index_array

    def _store_new(self, unique: list[str], entries: list[_CachedFile]) -> None:
        for name, entry in zip(unique, entries):
            if entry.store is None and entry.storable:
                self._store(name, entry)

    def _store(self, name: str, entry: _CachedFile) -> None:
        """Copy a cached file's row columns into the row store of their layout, counting them (and the arrays
        made from its list columns) against the cache bound. A file evicted meanwhile is left alone."""
        row_columns = _row_columns(entry.arrays(), entry.n)
        stored_bytes = sum(a.nbytes for a in row_columns.values())
        made_bytes = entry.made_bytes()
        # Files of one store have the same keys: a batch of one store needs no per-file key check.
        layout = tuple((k, a.dtype, a.shape[1:]) for k, a in row_columns.items())
        key = (layout, tuple(k for k in entry.columns if k not in row_columns))
        with self._lock:
            if self._cache.get(name) is not entry or entry.store is not None or not entry.storable:
                return
            if row_columns:
                store = self._stores.get(key)
                if store is None:
                    store = self._stores[key] = _RowStore(key, row_columns)
                store.add(entry, row_columns)
            else:
                entry.storable = False
                stored_bytes = 0
            self._grow_locked(name, entry, stored_bytes + made_bytes)

    def _collate_columns(
        self, rows: Sequence[tuple[str, int]], files: dict[str, _CachedFile], batch: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Add the columns not yet in ``batch`` (files all with the same keys, indices checked); None when
        some column does not collate."""
        keys = [key for key in files[rows[0][0]].columns if key not in batch]
        if not keys:
            return batch
        file_arrays = {name: entry.arrays() for name, entry in files.items()}
        for key in keys:
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
                out = np.empty((len(rows),) + shape, dtype=dtype)
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

    def read(self, data_id: str) -> dict[str, Any]:
        """Return the sample; raises ``CheckpointError`` (missing / corrupt file) or ``ValueError`` (bad id)."""
        name, index = split_data_id(data_id)
        entry = self._file(name)
        if index >= entry.n:
            raise ValueError(f"data_id '{data_id}': file holds only {entry.n} samples")
        if entry.columns is not None:
            return {k: v[index] for k, v in entry.columns.items()}
        return entry.samples[index]


def save_policy(path_policy: str, name: str, state_dict: dict[str, Any], policy_iter: int) -> str:
    """Publish weights as ``{path_policy}/{name}.safetensors``; readers see the old or the new file, never half.
    Not fsynced: the file is replaced every fraction of a second, and the learner re-publishes after a restart."""
    os.makedirs(path_policy, exist_ok=True)
    return save_checkpoint(
        os.path.join(path_policy, name),
        {'model': state_dict, 'policy_iter': policy_iter, 'last_iter': policy_iter},
        durable=False,
    )


def load_policy(path: str) -> tuple[dict[str, Any], int]:
    """Return ``(model_state_dict, policy_iter)``; raises ``CheckpointError`` naming the file when bad."""
    state = load_checkpoint(path)
    return state['model'], int(state.get('policy_iter', state.get('last_iter', 0)))


_counter = itertools.count()


def unique_stem(prefix: str) -> str:
    """A file stem unique within this process and across processes (pid + counter)."""
    return f'{prefix}_{os.getpid()}_{next(_counter)}'


__all__ = [
    'save_samples',
    'SampleReader',
    'split_data_id',
    'save_policy',
    'load_policy',
    'unique_stem',
    'CheckpointError',
]
