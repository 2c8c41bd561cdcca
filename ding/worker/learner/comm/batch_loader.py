"""Building the batches of a learn task from the sample files the coordinator's metadata names (``BatchLoader``):
drop stale samples, read the files (concurrently on a thread pool), collate column by column where the files
allow it, skip and log what cannot be read."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import numpy as np

from ding.utils.file_transport import CheckpointError, split_data_id

from .learn_task_data import (
    META_TO_SAMPLE,
    as_columns,
    batch_size_of,
    group_metadata,
    group_rows,
    grouped_order,
    metadata_columns,
    policy_iters,
    policy_versions,
    split_batch,
    split_data_ids,
    take,
)
from .learner_run import LearnerRun, Prepared


class BatchLoader:
    """Reads and collates the batches of the comm learner's runs; ``pool`` reads files concurrently (None:
    one by one), ``logger`` gets the warnings about samples skipped."""

    def __init__(self, pool: ThreadPoolExecutor | None, logger: Any) -> None:
        self._pool = pool
        self._logger = logger

    def load_batch(self, run: LearnerRun, metadata: Any) -> tuple[Any, list[int], int, int]:
        """(batch, policy_iter of each sample, stale dropped, unreadable): drop stale samples, load the files of
        the rest (uncached ones concurrently), then build the batch.

        ``metadata`` is a dict of columns (the demand's ``layout``) or a list of sample dicts. The batch is
        collated here, column by column from the cached files (``SampleReader.gather``): a dict of batched
        tensors, what the policy would make of the list of sample dicts, at a fraction of the cost. Where the
        files do not allow that, it is the list of sample dicts, as the policy also accepts. Either way the
        replay buffer's fields of the metadata (``META_TO_SAMPLE``) are part of each sample. Samples are
        grouped by file (files in order of first use).
        """
        if run.replay is not None:
            return self._replay_batch(run, batch_size_of(metadata))
        columns = as_columns(metadata)
        positions, stale = self._fresh_positions(run, columns)
        if not columns['data_id'] or (positions is not None and not positions):
            return [], [], stale, 0
        reader = run.reader
        unreadable = 0
        gathered = None
        located = self._rows_in_cached_files(run, columns, positions)
        if located is not None:
            try:
                gathered = reader.gather(located[0])
            except Exception:  # e.g. an index beyond its file: the checks below find the sample and log it
                located = None
        if located is None:
            rows, kept, unreadable = self._checked_rows(run, columns, positions)
            if not rows:
                return [], [], stale, unreadable
            try:
                gathered = reader.gather(rows)
            except Exception:  # e.g. a file evicted and gone since it was checked: read the samples one by one
                gathered = None
        else:
            rows, kept = located

        batch: Any = None
        if gathered is not None:
            meta = metadata_columns(columns, kept)
            if meta is not None:
                gathered.update(meta)
                batch = gathered
        if batch is None:
            batch, failed = self._read_one_by_one(run, rows, columns, kept)
            unreadable += failed
        return batch, policy_iters(batch), stale, unreadable

    def load_group(self, run: LearnerRun, batches: list[Any]) -> list[Any]:
        """A learn task's batches (``num_batches`` runs), built all at once where that gives what ``load_batch``
        gives for each (the usual case: columns of well-formed data ids of files that load, no staleness
        bound): one data-id split, one ``gather`` and one metadata collation for the task instead of one per
        batch, so the data loader runs once per learn task rather than once per iteration. The batches come
        back as ``Prepared`` (views of the task's tensors); otherwise as received, each built when handed over
        (which also finds, logs and counts what is wrong with them).
        """
        if run.replay is not None or run.max_staleness != math.inf or len(batches) < 2:
            return batches  # staleness is judged against the learner's iteration when a batch is handed over
        rows = group_rows(batches, run.data_ids)
        if rows is None:
            return batches
        files, which, indices, sizes, order = rows
        if run.bad_files and not run.bad_files.keys().isdisjoint(files):
            return batches
        meta = group_metadata(batches, order)
        if meta is None or not self._load_files(run, files):
            return batches
        try:
            # indices: an integer array, which gather_indexed indexes with like a sequence of ints
            gathered = run.reader.gather_indexed(files, which, cast(Sequence[int], indices))
        except Exception:  # e.g. an index beyond its file
            return batches
        if gathered is None:
            return batches
        gathered.update(meta)
        return [Prepared((batch, policy_iters(batch), 0, 0)) for batch in split_batch(gathered, sizes)]

    @staticmethod
    def _replay_batch(run: LearnerRun, size: int) -> tuple[Any, list[int], int, int]:
        """A batch of ``size`` from the replay service, for a learn task of tickets (``replay_address``): waits
        while the service has none to give (outage, or fewer samples than a batch), until the run ends."""
        while not run.ending.is_set():
            batch = run.replay.sample(size, run.next_batch_iter())
            if batch is not None:
                return batch, [], 0, 0
        return [], [], 0, 0

    def _load_files(self, run: LearnerRun, files: list[str]) -> bool:
        """Load the files not cached yet (concurrently on the read pool); False if one does not load."""
        reader = run.reader
        uncached = [name for name in files if not reader.cached(name)]
        try:
            if self._pool is not None and len(uncached) > 1:
                list(self._pool.map(reader.num_samples, uncached))
            else:
                for name in uncached:
                    reader.num_samples(name)
        except Exception:  # unreadable, or not a sample file: load_batch logs and counts it
            return False
        return True

    @staticmethod
    def _fresh_positions(run: LearnerRun, columns: dict[str, list[Any]]) -> tuple[list[int] | None, int]:
        """Positions of the samples at most ``max_staleness`` iterations older than the learner (None: all of
        them), and how many were dropped. A sample without a policy version is never stale."""
        bound = run.max_staleness
        if bound == math.inf:
            return None, 0
        versions = policy_versions(columns, len(columns['data_id']))
        too_old = (run.next_batch_iter() - versions) > bound  # NaN compares False: kept
        stale = int(np.count_nonzero(too_old))
        return (np.flatnonzero(~too_old).tolist() if stale else None), stale

    @staticmethod
    def _rows_in_cached_files(
        run: LearnerRun, columns: dict[str, list[Any]], positions: list[int] | None
    ) -> tuple[list[tuple[str, int]], Any] | None:
        """``(rows, positions of their samples)`` without a check per file, when every data id is well formed
        and names a cached file not known to be bad: the usual case once the reader's cache is warm. None
        otherwise (``_checked_rows`` reads, checks and logs). An index beyond its file makes ``gather`` raise."""
        split = split_data_ids(take(columns['data_id'], positions))
        if split is None:
            return None
        names, indices, files = split
        if run.bad_files and not run.bad_files.keys().isdisjoint(files):
            return None
        if not all(map(run.reader.cached, files)):
            return None
        order = grouped_order(names, files)
        if order is not None:
            names, indices = take(names, order), take(indices, order)
            positions = take(positions, order) if positions is not None else order
        return list(zip(names, indices)), positions

    def _checked_rows(
        self, run: LearnerRun, columns: dict[str, list[Any]], positions: list[int] | None
    ) -> tuple[list[tuple[str, int]], list[int], int]:
        """``(rows, positions of their samples, unreadable)``: the samples whose files load and hold them,
        grouped by file. Malformed data ids and unreadable files are logged (a file once), corrupt files
        remembered in ``run.bad_files``."""
        data_ids = columns['data_id']
        # file name -> (positions in the columns, sample indices in the file)
        groups: dict[str, tuple[list[int], list[int]]] = {}
        unreadable = 0
        for i in range(len(data_ids)) if positions is None else positions:
            try:
                name, index = split_data_id(data_ids[i])
            except ValueError as exc:
                unreadable += 1
                self._logger.warning(f'learner task {run.task_id}: sample skipped: {exc}')
                continue
            if name in run.bad_files:
                unreadable += 1
                continue
            group = groups.get(name)
            if group is None:
                groups[name] = group = ([], [])
            group[0].append(i)
            group[1].append(index)

        # Only files that are not cached yet go to the read pool (disk reads overlap); a cached file is a
        # dictionary lookup, cheaper done here than handed to another thread.
        reader = run.reader
        pool = self._pool
        uncached = [name for name in groups if not reader.cached(name)] if pool is not None else []
        futures = (
            {name: pool.submit(self._check_group, run, name, *groups[name]) for name in uncached}
            if pool is not None and len(uncached) > 1
            else {}
        )
        results = [
            (name, futures[name].result() if name in futures else self._check_group(run, name, *group))
            for name, group in groups.items()
        ]

        rows: list[tuple[str, int]] = []  # (file, index) of each sample to train on
        kept: list[int] = []  # ... and its position in the columns
        for name, (valid, error) in results:
            if error is not None:
                n = len(groups[name][0])
                unreadable += n
                path = os.path.join(reader.path_data, name)
                # A corrupt file stays corrupt; a missing one may still show up (a slow shared file system).
                if os.path.exists(path):
                    run.bad_files[name] = error
                if name not in run.logged_files:
                    run.logged_files.add(name)
                    self._logger.warning(
                        f'learner task {run.task_id}: skipped {n} sample(s) of unreadable file {path}: {error}'
                    )
                continue
            unreadable += len(groups[name][0]) - len(valid)
            for i, index in valid:
                rows.append((name, index))
                kept.append(i)
        return rows, kept, unreadable

    def _read_one_by_one(
        self, run: LearnerRun, rows: list[tuple[str, int]], columns: dict[str, list[Any]], positions: list[int] | None
    ) -> tuple[list[dict[str, Any]], int]:
        """The batch as a list of sample dicts (files that ``gather`` cannot collate), each with its metadata
        fields of ``META_TO_SAMPLE``; and how many samples could not be read."""
        meta = [(key, columns[key]) for key in META_TO_SAMPLE if columns.get(key) is not None]
        batch: list[dict[str, Any]] = []
        failed = 0
        for (name, index), i in zip(rows, range(len(rows)) if positions is None else positions):
            try:  # a new dict: the fields may be added
                sample = run.reader.read_file_samples(name, [index])[0]
                if sample is None:  # the file changed since it was checked
                    raise IndexError(f'index {index} is beyond the samples of the file')
            except Exception as exc:  # evicted from the cache since, and gone or damaged on disk
                failed += 1
                self._logger.warning(f"learner task {run.task_id}: sample '{name}#{index}' skipped: {exc}")
                continue
            for key, column in meta:
                if column[i] is not None:
                    sample[key] = column[i]
            batch.append(sample)
        return batch, failed

    def _check_group(
        self, run: LearnerRun, name: str, positions: list[int], indices: list[int]
    ) -> tuple[list[tuple[int, int]], str | None]:
        """Load file ``name`` (into the reader's cache) and check the sample ``indices``:
        ``([(position, index) of each sample it holds], None)``, or ``([], why)`` if the file is bad."""
        try:
            n = run.reader.num_samples(name)
        except CheckpointError as exc:
            return [], str(exc)
        except Exception as exc:  # a file that verifies but is not a sample file
            return [], f'{type(exc).__name__}: {exc}'
        valid = []
        for position, index in zip(positions, indices):
            if index < n:
                valid.append((position, index))
            else:
                self._logger.warning(
                    f"learner task {run.task_id}: sample skipped: data_id '{name}#{index}' is "
                    f'beyond the samples of its file'
                )
        return valid, None
