"""``CheckpointUploader``: stores a learner's checkpoints under ``ckpt_uri`` from a background thread.

``submit`` (on the training thread) only hard-links the just-written local files into a staging folder, so
training never waits on the network and a local prune or an overwritten ``ckpt_best`` cannot pull a file from
under an upload. The thread uploads each checkpoint (``RemoteCheckpoints``), retrying with exponential backoff
and jitter; after more than ``upload_retries`` failed attempts in a row the uploader is *stalled*: it keeps retrying (the wait capped
at ``MAX_RETRY_WAIT``), listeners hear ``checkpoint_stalled``, and ``checkpoint_recovered`` once an upload works
again. Older periodic checkpoints waiting behind a stall are dropped beyond ``keep_n``: they would be pruned.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .checkpoint_settings import CheckpointSettings
from .file_names import manifest_path
from .remote_checkpoint import BEST, RemoteCheckpoints

MAX_RETRY_WAIT = 30.0
STAGING_DIR = '.upload'


@dataclass
class _Job:
    data_path: str  # staged copy
    record: dict[str, Any]


class CheckpointUploader:
    """Uploads submitted checkpoints in order on one thread. ``run_info()`` (optional) gives MANIFEST.json's
    run-level fields (config snapshot, exp_name, ...). Listeners get ``(event, fields)`` on the upload thread:
    ``checkpoint_uploaded``, ``checkpoint_upload_failed``, ``checkpoint_stalled``, ``checkpoint_recovered``."""

    def __init__(
        self,
        settings: CheckpointSettings,
        staging_root: str,
        run_info: Callable[[], Mapping[str, Any]] | None = None,
        remote: RemoteCheckpoints | None = None,
        sleep: Callable[[float], Any] | None = None,
    ) -> None:
        self.settings = settings
        self.remote = remote or RemoteCheckpoints(settings)
        self._staging = os.path.join(staging_root, STAGING_DIR)
        shutil.rmtree(self._staging, ignore_errors=True)  # left by a run that crashed: those files are local anyway
        self._run_info = run_info or dict
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._busy = False
        self._seq = 0
        self._listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self._wait = sleep or self._stop.wait
        self.stalled = False
        self.failures = 0  # failed attempts in a row
        self.uploaded = 0
        self.dropped = 0
        self.last_uploaded: dict[str, Any] | None = None
        self.last_error: str | None = None
        self.stalled_since: float | None = None
        self._thread = threading.Thread(target=self._run, name='ckpt-uploader', daemon=True)
        self._thread.start()

    # ---- training thread -------------------------------------------------------------------------------
    def add_listener(self, listener: Callable[[str, dict[str, Any]], None]) -> None:
        self._listeners.append(listener)

    def submit(self, data_path: str, record: Mapping[str, Any]) -> None:
        """Queue the local checkpoint ``data_path`` (record: name, iteration, envstep, kind, ...)."""
        if record.get('kind') == BEST and not self.settings.keep_best:
            return
        with self._cond:
            self._seq += 1
            seq = self._seq
        staged = self._stage(data_path, os.path.join(self._staging, f'{seq:06d}'))
        with self._cond:
            self._jobs.append(_Job(staged, dict(record)))
            self._drop_superseded()
            self._cond.notify_all()

    def _stage(self, data_path: str, folder: str) -> str:
        # One folder per checkpoint keeps the files' own names (the uploaded names).
        os.makedirs(folder, exist_ok=True)
        target = os.path.join(folder, os.path.basename(data_path))
        for src, dst in ((data_path, target), (manifest_path(data_path), manifest_path(target))):
            try:
                os.link(src, dst)  # O(1); the inode outlives a prune or an overwrite of src
            except OSError:
                shutil.copyfile(src, dst)
        return target

    def _drop_superseded(self) -> None:
        # Under the lock. Beyond keep_n periodic checkpoints (or a second best) waiting, the oldest ones
        # would be pruned right after their upload: skip them.
        for kind, keep in ((BEST, 1), (None, self.settings.keep_n)):
            same = [j for j in self._jobs if (j.record.get('kind') == BEST) == (kind == BEST)]
            for job in same[: max(len(same) - keep, 0)]:
                self._jobs.remove(job)
                self._unstage(job)
                self.dropped += 1

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._jobs)  # the one being uploaded stays first in the queue until it is stored

    def state(self) -> dict[str, Any]:
        """What health / status / metrics report about checkpoint storage."""
        last = self.last_uploaded or {}
        return {
            'ckpt_uri': self.settings.ckpt_uri,
            'stalled': self.stalled,
            'stalled_seconds': round(time.time() - self.stalled_since, 3) if self.stalled_since else 0.0,
            'pending': self.pending,
            'uploaded': self.uploaded,
            'failed_attempts_in_a_row': self.failures,
            'dropped': self.dropped,
            'last_uploaded': last.get('key'),
            'last_uploaded_iteration': last.get('last_iter'),
            'last_error': self.last_error,
        }

    def wait_until_recovered(self, should_stop: Callable[[], bool] = lambda: False, poll: float = 0.5) -> None:
        """Block while stalled (``on_stall='pause'``); returns early once ``should_stop()``."""
        while self.stalled and not self._stop.is_set() and not should_stop():
            time.sleep(poll)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for every queued checkpoint to be stored; True when none is left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._jobs or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.2))
        return True

    def close(self, timeout: float | None = None) -> bool:
        """Flush (up to ``timeout``, default ``flush_seconds``), then stop the thread; True when nothing was lost."""
        if self._stop.is_set():  # closed before: what is left stays left
            return not self._jobs
        done = self.flush(self.settings.flush_seconds if timeout is None else timeout)
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=10)
        return done

    # ---- upload thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while not self._jobs and not self._stop.is_set():
                    self._cond.wait(0.5)
                if self._stop.is_set():
                    return
                job = self._jobs[0]
                self._busy = True
            try:
                self._store(job)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _store(self, job: _Job) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                entry = self.remote.upload(job.data_path, job.record)
                self.remote.commit(entry, self._run_info())
            except Exception as exc:  # any failure of the store (network, credentials, server errors) is retried
                self._failed(job, exc)
                # The wait grows with the failures in a row, whichever checkpoint they were for: a newer one
                # superseding a failing one must not restart the backoff (nor hide the stall) during an outage.
                self._wait(self._backoff(self.failures))
                with self._cond:
                    if job not in self._jobs:  # dropped meanwhile (superseded by newer checkpoints)
                        return
                continue
            seconds = time.perf_counter() - t0
            with self._cond:
                if job in self._jobs:
                    self._jobs.remove(job)
            self._unstage(job)
            self._succeeded(entry, seconds)
            return

    def _backoff(self, attempt: int) -> float:
        base = min(self.settings.retry_seconds * 2 ** (attempt - 1), MAX_RETRY_WAIT)
        return base * random.uniform(0.5, 1.0)  # jitter: many learners behind one outage do not retry in step

    def _failed(self, job: _Job, exc: Exception) -> None:
        self.failures += 1
        self.last_error = f'{type(exc).__name__}: {exc}'
        name, failures = job.record.get('name'), self.failures
        self._emit('checkpoint_upload_failed', checkpoint=name, attempt=failures, error=self.last_error)
        if not self.stalled and failures > self.settings.upload_retries:
            self.stalled = True
            self.stalled_since = time.time()
            self._emit('checkpoint_stalled', checkpoint=name, attempts=failures, error=self.last_error)

    def _succeeded(self, entry: dict[str, Any], seconds: float) -> None:
        self.uploaded += 1
        self.failures = 0
        self.last_uploaded = entry
        if self.stalled:
            self.stalled = False
            self.stalled_since = None
            self._emit('checkpoint_recovered', checkpoint=entry['key'])
        self._emit(
            'checkpoint_uploaded',
            checkpoint=entry['key'],
            uri=entry['uri'],
            iteration=entry['last_iter'],
            stored_bytes=entry['stored_bytes'],
            seconds=round(seconds, 4),
        )

    def _unstage(self, job: _Job) -> None:
        shutil.rmtree(os.path.dirname(job.data_path), ignore_errors=True)

    def _emit(self, event: str, **fields: Any) -> None:
        for listener in list(self._listeners):
            try:
                listener(event, fields)
            except Exception:  # a broken listener must not stop checkpoint uploads
                pass


__all__ = ['CheckpointUploader', 'MAX_RETRY_WAIT']
