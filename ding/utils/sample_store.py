"""The in-memory form of cached sample files, for ``ding.utils.sample_reader.SampleReader``: a decoded file
(``CachedFile``) with numpy views of its columns, and the row store (``RowStore``) that batches gather from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in ``value`` (nested dicts, lists and tuples)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


# Tensor dtypes numpy shares memory with (``Tensor.numpy()``); others (bfloat16...) take the generic path.
NUMPY_DTYPES = frozenset(
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


def column_array(column: Any) -> np.ndarray | None:
    """A numpy view of a file column for row gathers, or None where only the generic path fits.

    A tensor column shares its memory. A list column of python numbers becomes the array ``default_collate``
    would build for that list (bool if all bools, int64 if all ints, float32 if all real), so a gather gives
    the same batch; anything else (strings, dicts, mixed types) is None.
    """
    if isinstance(column, torch.Tensor):
        if column.dtype in NUMPY_DTYPES and column.device.type == 'cpu' and not column.requires_grad:
            return column.numpy()
        return None
    if not column:
        return None
    first = column[0]
    kind: type[np.generic] | None
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


def file_row_columns(arrays: dict[str, np.ndarray | None], n: int) -> dict[str, np.ndarray]:
    """The numpy columns of a file that hold one row per sample, the ones a ``RowStore`` keeps."""
    return {key: array for key, array in arrays.items() if array is not None and array.ndim and len(array) == n}


class CachedFile:
    """One cached sample file: its columns (or its samples, when they could not be stacked), and where its
    rows are in a ``RowStore`` once a gather has stored them."""

    __slots__ = ('columns', 'samples', 'n', 'nbytes', '_arrays', 'store', 'base', 'storable')

    def __init__(
        self, columns: dict[str, Any] | None, samples: list[dict[str, Any]] | None, n: int, nbytes: int
    ) -> None:
        self.columns = columns
        self.samples = samples
        self.n = n
        self.nbytes = nbytes
        self._arrays: dict[str, np.ndarray | None] | None = None
        self.store: RowStore | None = None  # set and cleared under the reader's lock
        self.base = 0  # the store row of this file's first sample
        self.storable = columns is not None  # False once found to have no column a store keeps

    def stored_columns(self) -> dict[str, Any]:
        """The columns of a file stored as columns (the column paths are taken only for such files)."""
        if self.columns is None:
            raise ValueError('this sample file holds samples, not columns')
        return self.columns

    def stored_samples(self) -> list[dict[str, Any]]:
        """The samples of a file whose samples could not be stacked into columns."""
        if self.samples is None:
            raise ValueError('this sample file holds columns, not samples')
        return self.samples

    def arrays(self) -> dict[str, np.ndarray | None]:
        """Numpy views of the columns, built on the first gather (see ``column_array``)."""
        arrays = self._arrays
        if arrays is None:
            arrays = self._arrays = {k: column_array(v) for k, v in self.stored_columns().items()}
        return arrays

    def made_bytes(self) -> int:
        """Bytes of the arrays built from list columns (views of tensor columns cost nothing more)."""
        columns = self.stored_columns()
        return sum(
            a.nbytes for k, a in self.arrays().items() if a is not None and not isinstance(columns[k], torch.Tensor)
        )


class RowStore:
    """The rows of all cached files of one layout, column by column in one array per key, so that a batch
    over many files is one ``take`` per key rather than a copy per row. A file's rows are appended once, at
    its ``base``; an evicted file's rows stay, dead, until they outnumber the live ones, then the arrays are
    rebuilt from the live files (so they hold at most ~4x the live rows: half dead, half spare capacity).
    Only touched under ``the reader's lock``; a rebuild makes new arrays, so a ``take`` is never torn."""

    __slots__ = ('key', 'columns', 'used', 'dead', 'files')

    def __init__(self, key: tuple, row_columns: dict[str, np.ndarray]) -> None:
        self.key = key
        self.columns = {k: np.empty((0,) + a.shape[1:], a.dtype) for k, a in row_columns.items()}
        self.used = 0  # rows in use, live or dead; beyond them is spare capacity
        self.dead = 0
        self.files: dict[CachedFile, None] = {}  # the live files, in the order of their rows

    def capacity(self) -> int:
        return len(next(iter(self.columns.values())))

    def add(self, entry: CachedFile, row_columns: dict[str, np.ndarray]) -> None:
        n = entry.n
        if self.used + n > self.capacity():  # doubling: appends cost amortised O(1) per row
            self._move_live_rows(max(2 * self.capacity(), self.used + n))
        for key, column in self.columns.items():
            column[self.used : self.used + n] = row_columns[key]
        entry.store, entry.base = self, self.used
        self.used += n
        self.files[entry] = None

    def remove(self, entry: CachedFile) -> None:
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


def one_key_set(entries: Sequence[CachedFile]) -> bool:
    """Whether every file is stored as columns, all with the same keys."""
    if entries[0].columns is None:
        return False
    keys = entries[0].columns.keys()
    return all(entry.columns is not None and entry.columns.keys() == keys for entry in entries)
