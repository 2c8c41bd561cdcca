"""Reading the sample files of ``path_data`` (written by ``ding.utils.file_transport.save_samples``) by
``data_id``, through a cache of decoded files: one sample (``read``), some samples of a file, or whole batches
collated column by column (``gather`` / ``gather_indexed``)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .checkpoint import load_checkpoint
from .collate import default_collate
from .file_names import split_data_id
from .sample_store import CachedFile, RowStore, file_row_columns, one_key_set, tensor_bytes


def _index_error(name: str, index: int, n: int) -> IndexError:
    return IndexError(f"data_id '{name}#{index}': file holds only {n} samples")


def _check_indices(rows: Sequence[tuple[str, int]], files: dict[str, CachedFile]) -> None:
    for name, index in rows:
        if not 0 <= index < files[name].n:
            raise _index_error(name, index, files[name].n)


class SampleReader:
    """Loads samples by data_id, caching the most recently read files.

    A replay buffer samples uniformly over every file it refers to, so a batch hits many files: the cache
    keeps whole files (as loaded: one stacked tensor per key, no per-sample objects) up to ``cache_bytes``
    of tensor data (and at most ``cache_files`` files), least recently used out first. A sample's dict is
    built on each read (views into the file's tensors); ``gather`` builds a whole collated batch instead,
    from copies of the files' columns kept per layout in one ``RowStore`` (counted against ``cache_bytes``).
    """

    def __init__(self, path_data: str, cache_files: int = 4096, cache_bytes: int = 256 * 1024 * 1024) -> None:
        self.path_data = path_data
        self._cache: OrderedDict[str, CachedFile] = OrderedDict()
        self._cache_files = cache_files
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0
        self._stores: dict[tuple, RowStore] = {}  # by (layout, the keys it does not store)
        self._lock = threading.Lock()

    def _file(self, name: str) -> CachedFile:
        with self._lock:
            entry = self._cache.get(name)
            if entry is not None:
                self._cache.move_to_end(name)
                return entry
        state = load_checkpoint(os.path.join(self.path_data, name))
        if 'columns' in state:
            columns = state['columns']
            n = len(next(iter(columns.values()))) if columns else 0
            entry = CachedFile(columns, None, n, tensor_bytes(columns))
        else:
            samples = state['samples']
            entry = CachedFile(None, samples, len(samples), tensor_bytes(samples))
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

    def _grow(self, name: str, entry: CachedFile, extra: int) -> None:
        """Count ``extra`` bytes more for a cached file (evicting others beyond the bound, never this one)."""
        with self._lock:
            if self._cache.get(name) is entry:
                self._grow_locked(name, entry, extra)

    def _grow_locked(self, name: str, entry: CachedFile, extra: int) -> None:
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
        samples = entry.stored_samples()
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
        if batch is not None and len(batch) == len(entries[0].stored_columns()):  # the usual case: every key stored
            return batch
        rows = list(zip(map(unique.__getitem__, which.tolist()), np.asarray(indices).tolist()))
        files = dict(zip(unique, entries))
        if batch is None:
            if not one_key_set(entries):
                return None
            _check_indices(rows, files)
            batch = {}
        return self._collate_columns(rows, files, batch)

    def _entries(self, names: list[str]) -> list[CachedFile]:
        """The cached files ``names`` (loading the missing ones), marked used: ``_file`` for each, with one
        lock acquisition for the usual batch of cached files."""
        with self._lock:
            entries = list(map(self._cache.get, names))
            for name, entry in zip(names, entries):
                if entry is not None:
                    self._cache.move_to_end(name)
        return [entry if entry is not None else self._file(name) for name, entry in zip(names, entries)]

    def _gather_stored(
        self, where: np.ndarray, indices: Sequence[int], unique: list[str], entries: list[CachedFile]
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
        self, unique: list[str], index_array: np.ndarray, where: np.ndarray, entries: list[CachedFile]
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

    def _store_new(self, unique: list[str], entries: list[CachedFile]) -> None:
        for name, entry in zip(unique, entries):
            if entry.store is None and entry.storable:
                self._store(name, entry)

    def _store(self, name: str, entry: CachedFile) -> None:
        """Copy a cached file's row columns into the row store of their layout, counting them (and the arrays
        made from its list columns) against the cache bound. A file evicted meanwhile is left alone."""
        row_columns = file_row_columns(entry.arrays(), entry.n)
        stored_bytes = sum(a.nbytes for a in row_columns.values())
        made_bytes = entry.made_bytes()
        # Files of one store have the same keys: a batch of one store needs no per-file key check.
        layout = tuple((k, a.dtype, a.shape[1:]) for k, a in row_columns.items())
        key = (layout, tuple(k for k in entry.stored_columns() if k not in row_columns))
        with self._lock:
            if self._cache.get(name) is not entry or entry.store is not None or not entry.storable:
                return
            if row_columns:
                store = self._stores.get(key)
                if store is None:
                    store = self._stores[key] = RowStore(key, row_columns)
                store.add(entry, row_columns)
            else:
                entry.storable = False
                stored_bytes = 0
            self._grow_locked(name, entry, stored_bytes + made_bytes)

    @staticmethod
    def _same_layout_views(
        file_arrays: dict[str, dict[str, np.ndarray | None]], key: str
    ) -> dict[str, np.ndarray] | None:
        """Each file's numpy view of column ``key`` when all have one, of one dtype and row shape; else None."""
        views: dict[str, np.ndarray] = {}
        for name, arrays in file_arrays.items():
            a = arrays[key]
            if a is None:
                return None
            views[name] = a
        ref = next(iter(views.values()))
        if any(a.dtype != ref.dtype or a.shape[1:] != ref.shape[1:] for a in views.values()):
            return None
        return views

    def _collate_columns(
        self, rows: Sequence[tuple[str, int]], files: dict[str, CachedFile], batch: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Add the columns not yet in ``batch`` (files all with the same keys, indices checked); None when
        some column does not collate."""
        keys = [key for key in files[rows[0][0]].stored_columns() if key not in batch]
        if not keys:
            return batch
        file_arrays = {name: entry.arrays() for name, entry in files.items()}
        for key in keys:
            # Fast path: every file has a numpy view of this column with one dtype and row shape.
            views = self._same_layout_views(file_arrays, key)
            if views is not None:
                ref = views[rows[0][0]]
                out = np.empty((len(rows), *ref.shape[1:]), dtype=ref.dtype)
                for j, (name, index) in enumerate(rows):
                    out[j] = views[name][index]
                batch[key] = torch.from_numpy(out)
                continue
            try:
                columns = {name: entry.stored_columns()[key] for name, entry in files.items()}
                batch[key] = default_collate([columns[name][index] for name, index in rows])
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
        return entry.stored_samples()[index]
