"""The data of a learn task: checking its batches of sample metadata (lists of dicts, or dicts of columns),
and the helpers that turn metadata into training batches: data ids split into (file, index) rows, samples
grouped by file, the replay buffer's fields as batch columns. No torch model code here: it is shared by the
comm learner's loader and its tests."""

from __future__ import annotations

import os
from collections.abc import Sequence
from itertools import accumulate, chain
from typing import Any, cast

import numpy as np
import torch

from ding.interaction import TaskFail
from ding.utils.collate import default_collate
from ding.utils.learn_task_layout import COLUMNS_LAYOUT, JSON_SCALAR_TYPES

# Metadata fields copied onto the loaded sample: the replay buffer's bookkeeping (priority updates,
# importance-sampling weights) and the policy version that produced it.
META_TO_SAMPLE = ('replay_unique_id', 'replay_buffer_idx', 'IS', 'priority', 'policy_iter')
# The metadata fields the learner reads, named in its demands (``fields``): the data id, the policy version
# that ``max_staleness`` and the policy lag use (``collect_iter`` where a sample has no ``policy_iter``), and
# ``META_TO_SAMPLE``. A coordinator that knows the opt-in sends only these, and as columns (``layout``).
METADATA_FIELDS = ('data_id', 'policy_iter', 'collect_iter', 'replay_unique_id', 'replay_buffer_idx', 'IS', 'priority')
# Those only a prioritized replay needs: the buffer's bookkeeping for priority updates, and the weights.
_PRIORITY_FIELDS = ('replay_unique_id', 'replay_buffer_idx', 'IS', 'priority')


def demand_fields(policy_cfg: dict[str, Any]) -> list[str]:
    """The ``METADATA_FIELDS`` a learner of this policy config reads: without the prioritized replay's fields
    when the config turns both ``priority`` and ``priority_IS_weight`` off (about half of each learn task's
    JSON for a uniform buffer); all of them when it does not say."""
    if not policy_cfg.get('priority', True) and not policy_cfg.get('priority_IS_weight', False):
        return [field for field in METADATA_FIELDS if field not in _PRIORITY_FIELDS]
    return list(METADATA_FIELDS)


def number_or_none(v: Any) -> float | None:
    if v.__class__ is float or v.__class__ is int:
        return v
    return None


_PLAIN_DTYPES = {int: np.int64, float: np.float32, bool: np.bool_}
_NONE = type(None)
_NUMBERS_OR_NONE = frozenset((int, float, _NONE))


def collate_values(values: list[Any]) -> Any:
    """``default_collate(values)``, quicker for the metadata's plain ints / floats / strings of one type."""
    types = set(map(type, values))
    if len(types) == 1:
        cls = values[0].__class__
        if cls is str:
            return list(values)
        dtype = _PLAIN_DTYPES.get(cls)
        if dtype is not None:
            return torch.from_numpy(np.array(values, dtype=dtype))
    return default_collate(values)


def batch_size_of(batch: Any) -> int:
    """How many samples a batch of metadata holds (a list of dicts, or a dict of columns)."""
    if batch.__class__ is dict:
        return len(batch.get('data_id') or ())
    return len(batch)


def as_columns(batch: Any) -> dict[str, list[Any]]:
    """A batch of metadata as columns of ``METADATA_FIELDS``, None where a sample lacks the field: a dict of
    columns as received, or the list of sample dicts of a coordinator that ignores the columns opt-in."""
    if batch.__class__ is dict:
        return batch
    return {field: [meta.get(field) for meta in batch] for field in METADATA_FIELDS}


def take(values: Sequence[Any], positions: Sequence[int] | None) -> list[Any]:
    """``values`` at ``positions`` (None: all of them, in order)."""
    if positions is None:
        return values if isinstance(values, list) else list(values)
    return [values[p] for p in positions]


def _numbers(values: list[Any] | None, n: int) -> np.ndarray:
    """A metadata column as float64, NaN where a sample has no int / float (missing, a string, a bool)."""
    if values is None:
        return np.full(n, np.nan)
    if set(map(type, values)) <= _NUMBERS_OR_NONE:
        return np.array(values, dtype=np.float64)  # None -> NaN
    return np.array([v if number_or_none(v) is not None else np.nan for v in values], dtype=np.float64)


def policy_versions(columns: dict[str, list[Any]], n: int) -> np.ndarray:
    """The policy iteration of each sample: ``policy_iter``, else ``collect_iter``, else NaN."""
    versions = _numbers(columns.get('policy_iter'), n)
    unknown = np.isnan(versions)
    if unknown.any():
        versions = np.where(unknown, _numbers(columns.get('collect_iter'), n), versions)
    return versions


def split_data_ids(data_ids: list[str]) -> tuple[Sequence[str], list[int], dict[str, None]] | None:
    """``(file names, indices, the files in order of first use)`` of ``data_ids`` as ``split_data_id`` gives
    them, in a few passes of C string methods over the lists rather than a Python call per sample; None when
    any is malformed (``split_data_id`` then finds and names it)."""
    if not data_ids:
        return [], [], {}
    names, _, digits = zip(*[data_id.rpartition('#') for data_id in data_ids])
    files = dict.fromkeys(names)
    if not all(map(str.isdigit, digits)) or not _plain_file_names(files):
        return None
    try:
        indices = list(map(int, digits))
    except ValueError:  # digits that int() does not read (e.g. superscripts)
        return None
    return names, indices, files


def _plain_file_names(names: dict[str, None]) -> bool:
    """Whether every name is one that ``split_data_id`` accepts (not empty, no leading dot, no path separator),
    checked on all of them at once: joined between separators, a bad name shows as an extra separator, two
    adjacent ones, or a separator followed by a dot."""
    sep = os.sep
    wrapped = sep + sep.join(names) + sep
    return wrapped.count(sep) == len(names) + 1 and sep + sep not in wrapped and sep + '.' not in wrapped


def grouped_order(names: Sequence[str], files: dict[str, None]) -> list[int] | None:
    """The order that groups the samples by file (files in order of first use, samples in their order within
    a file: what the per-file checks give); None when they are grouped already, e.g. one sample per file, as a
    batch drawn uniformly from a big buffer mostly is."""
    if len(files) == len(names):
        return None
    rank = dict(zip(files, range(len(files))))
    keys = np.fromiter(map(rank.__getitem__, names), dtype=np.int64, count=len(names))
    if (keys[1:] >= keys[:-1]).all():
        return None
    return np.argsort(keys, kind='stable').tolist()


def metadata_columns(columns: dict[str, list[Any]], positions: list[int] | None) -> dict[str, Any] | None:
    """The ``META_TO_SAMPLE`` fields of the samples at ``positions`` as batch columns (see ``collate_values``);
    None where a field is missing on some samples only, or does not collate: no column can hold it."""
    out = {}
    for key in META_TO_SAMPLE:
        column = columns.get(key)
        if column is None:
            continue
        values = take(column, positions)
        if _NONE in set(map(type, values)):
            if values.count(None) == len(values):  # no sample has it (a column of a list of dicts)
                continue
            return None
        try:
            out[key] = collate_values(values)
        except (ValueError, OverflowError):  # as read one by one, only the policy's keys are collated
            return None
    return out


def learn_task_batches(demand: dict[str, Any], data: Any) -> list[Any]:
    """The batches of a learn task's ``data`` answering ``demand``: the list of batches of a ``num_batches``
    demand, else the one batch. A batch is a list of sample metadata dicts or, where the demand asked for
    that ``layout``, a dict of columns. Raises ``TaskFail`` naming what is malformed."""
    columns = demand.get('layout') == COLUMNS_LAYOUT
    one = 'a list of sample metadata' + (' or a dict of metadata columns' if columns else '')
    several = 'num_batches' in demand
    # A dict with a list of data ids is a batch of columns; any other dict in place of a batch is a sample (a
    # flat batch sent where a list of batches is due).
    if several and (
        data.__class__ is not list
        or any(
            batch.__class__ is not list
            and not (columns and batch.__class__ is dict and batch.get('data_id').__class__ is list)
            for batch in data
        )
    ):
        got = type(data).__name__ if data.__class__ is not list else 'a list holding other things'
        raise TaskFail(
            message=f'learner_learn_task: the demand asked for num_batches={demand["num_batches"]}, '
            f"so 'data' must be a list of batches (each {one}), got {got}"
        )
    batches = data if several else [data]
    for b, batch in enumerate(batches):
        if batch.__class__ is list:
            _check_sample_list(batch, f'data[{b}]' if several else 'data')
        elif columns and batch.__class__ is dict:
            _check_columns(batch, f'data[{b}]' if several else "'data'")
        else:
            raise TaskFail(message=f"learner_learn_task: 'data' must be {one}, got {type(batch).__name__}")
    return batches


def _check_sample_list(batch: list[Any], where: str) -> None:
    for i, meta in enumerate(batch):
        if not isinstance(meta, dict) or not isinstance(meta.get('data_id'), str):
            raise TaskFail(
                message=f"learner_learn_task: {where}[{i}] must be a dict with a string 'data_id', got {meta!r}"
            )


def _check_columns(batch: dict[str, Any], where: str) -> None:
    """A dict of columns: lists of one length, a string ``data_id`` for every sample, JSON scalars in the
    columns the learner reads (others are ignored). Checked a column at a time, not a value at a time."""
    data_ids = batch.get('data_id')
    if data_ids.__class__ is not list:
        raise TaskFail(
            message=f"learner_learn_task: {where} must have a 'data_id' column (a list of strings), "
            f'got {type(data_ids).__name__}'
        )
    n = len(data_ids)
    for field, column in batch.items():
        if column.__class__ is not list or len(column) != n:
            size = f'{len(column)} values' if column.__class__ is list else f'a {type(column).__name__}'
            raise TaskFail(
                message=f'learner_learn_task: {where}: column {field!r} must be a list of {n} values '
                f'(one per data_id), got {size}'
            )
    if not set(map(type, data_ids)) <= {str}:
        bad = next(v for v in data_ids if v.__class__ is not str)
        raise TaskFail(message=f'learner_learn_task: {where}: every data_id must be a string, got {bad!r}')
    for field in METADATA_FIELDS:
        column = batch.get(field)
        if column is not None and not set(map(type, column)) <= JSON_SCALAR_TYPES:
            bad = next(v for v in column if type(v) not in JSON_SCALAR_TYPES)
            raise TaskFail(
                message=f'learner_learn_task: {where}: column {field!r} may hold numbers, strings, '
                f'booleans and None only, got {bad!r}'
            )


class DataIdRows:
    """The ``(file, index)`` row of every data id seen, so that a learn task's ids are parsed once each: the
    replay buffer samples each of its ids many times, so most of a task's thousands of ids were seen before
    and cost a dict lookup. Files are numbered in order of first sight. Holds at most ``max_ids`` ids (about
    200 bytes each), then starts afresh: ids that left the replay buffer are never asked for again, so a few
    times the buffer's size keeps nearly every lookup a hit (see ``data_id_bound``). Not thread-safe: the data
    loader thread alone uses it."""

    def __init__(self, max_ids: int = 1 << 17) -> None:
        self.max_ids = max_ids
        self._reset()

    def _reset(self) -> None:
        self.files: list[str] = []  # file number -> name
        self._file_numbers: dict[str, int] = {}
        self._position: dict[str, int] = {}  # data id -> its row in _file_of / _index_of
        self._file_of = np.empty(0, dtype=np.int64)
        self._index_of = np.empty(0, dtype=np.int64)

    def rows(self, data_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """``(file numbers, indices)`` of ``data_ids`` (arrays); None when one is malformed (nothing is kept)."""
        found = list(map(self._position.get, data_ids))
        if None in found:
            new = list(dict.fromkeys(d for d, at in zip(data_ids, found) if at is None))
            split = split_data_ids(new)
            if split is None:
                return None
            if len(self._position) + len(new) > self.max_ids:  # start afresh (a very long run)
                self._reset()
                new = list(dict.fromkeys(data_ids))
                split = split_data_ids(new)
                if split is None:
                    return None
            self._add(new, *split)
            found = list(map(self._position.__getitem__, data_ids))
        at = np.array(found, dtype=np.intp)
        return self._file_of[at], self._index_of[at]

    def _add(self, new: list[str], names: Sequence[str], indices: list[int], files: dict[str, None]) -> None:
        for name in files:
            if name not in self._file_numbers:
                self._file_numbers[name] = len(self.files)
                self.files.append(name)
        start, end = len(self._position), len(self._position) + len(new)
        if end > len(self._file_of):  # grown by doubling: adding an id costs O(1) on average
            size = max(1024, 2 * end)
            self._file_of = np.concatenate([self._file_of[:start], np.empty(size - start, dtype=np.int64)])
            self._index_of = np.concatenate([self._index_of[:start], np.empty(size - start, dtype=np.int64)])
        self._position.update(zip(new, range(start, end)))
        self._file_of[start:end] = np.fromiter(map(self._file_numbers.__getitem__, names), np.int64, len(new))
        self._index_of[start:end] = indices


def data_id_bound(policy_cfg: dict[str, Any], default: int = 1 << 17) -> int:
    """``max_ids`` for a run's ``DataIdRows``: four times the replay buffer's size when the policy config gives
    it (``other.replay_buffer.replay_buffer_size``), else ``default``."""
    other = policy_cfg.get('other')
    buffer = other.get('replay_buffer') if isinstance(other, dict) else None
    size = buffer.get('replay_buffer_size') if isinstance(buffer, dict) else None
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return 4 * size
    return default


def group_rows(
    batches: list[Any], ids: DataIdRows
) -> tuple[list[str], np.ndarray, np.ndarray, list[int], list[int]] | None:
    """The rows of a learn task's batches taken together: ``(files, which, indices, batch sizes, order)``, row
    ``j`` being sample ``indices[j]`` of file ``files[which[j]]``, each batch's rows grouped by file as
    ``grouped_order`` groups the rows of one batch (and the batches one after another); ``order``: the rows'
    positions in the batches' columns, joined. None when a batch is not a dict of columns, or empty, or a
    data id is malformed: each batch is then built on its own, which finds and names the problem."""
    if not all(batch.__class__ is dict for batch in batches):
        return None
    sizes = [len(batch['data_id']) for batch in batches]
    if not all(sizes):
        return None
    located = ids.rows(list(chain.from_iterable(batch['data_id'] for batch in batches)))
    if located is None:
        return None
    file_of, indices = located
    batch_of = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    # A row's key: where its file is first used in its batch. Keys rise from batch to batch, and sorting by
    # them (stable) orders each batch's files by first use, keeping the order of the rows within a file.
    _, first, inverse = np.unique(batch_of * len(ids.files) + file_of, return_index=True, return_inverse=True)
    order = np.argsort(first[inverse.reshape(-1)], kind='stable')
    used, which = np.unique(file_of[order], return_inverse=True)
    return [ids.files[f] for f in used.tolist()], which.reshape(-1), indices[order], sizes, order.tolist()


def group_metadata(batches: list[dict[str, list[Any]]], order: list[int]) -> dict[str, Any] | None:
    """``metadata_columns`` of all the batches' rows at once (rows in ``order``); None where that could differ
    from collating each batch on its own: a field some batches lack, or values of more than one type."""
    out: dict[str, Any] = {}
    rows = None
    for key in META_TO_SAMPLE:
        columns = [batch.get(key) for batch in batches]
        if all(column is None for column in columns):
            continue
        if any(column is None for column in columns):
            return None
        values = list(chain.from_iterable(cast(list[list[Any]], columns)))  # none is None (checked above)
        kinds = set(map(type, values))
        if len(kinds) != 1:
            return None
        kind = kinds.pop()
        if kind is _NONE:  # no sample has it
            continue
        if kind is str:
            out[key] = take(values, order)
            continue
        dtype = _PLAIN_DTYPES.get(kind)
        if dtype is None:
            return None
        if rows is None:
            rows = np.array(order, dtype=np.intp)
        try:  # what collate_values makes of one batch's values, for all of them at once
            out[key] = torch.from_numpy(np.array(values, dtype=dtype)[rows])
        except (ValueError, OverflowError):
            return None
    return out


def split_batch(batch: dict[str, Any], sizes: list[int]) -> list[dict[str, Any]]:
    """A collated batch cut into consecutive batches of ``sizes`` rows (tensors as views, lists as slices)."""
    parts = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            parts[key] = value.split(sizes)
        else:
            ends = list(accumulate(sizes))
            parts[key] = [value[end - size : end] for size, end in zip(sizes, ends)]
    return [{key: part[k] for key, part in parts.items()} for k in range(len(sizes))]


def policy_iters(batch: Any) -> list[Any]:
    """The policy version of each sample of a built batch (a collated dict or a list of sample dicts) that has
    a number there."""
    versions = batch.get('policy_iter', ()) if batch.__class__ is dict else [s.get('policy_iter') for s in batch]
    if isinstance(versions, torch.Tensor) and versions.dtype is not torch.bool:
        return versions.tolist()  # numbers all
    return [p for p in versions if number_or_none(p) is not None]
