"""Publishing a learner's weights as the policy file collectors read: on a thread of its own, newest first,
at most once per interval (``PolicyPublisher``), written beside the old file and renamed over it
(``write_policy_file``)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from ding.utils.checkpoint import manifest_path
from ding.utils.file_transport import save_policy


class PolicyPublisher:
    """Writes policy files on its own thread, newest first: while one write runs, newer weights replace the
    waiting ones (collectors want the latest, and the learner must not wait for the disk).

    ``min_interval``: seconds between the writes of one run. Collectors reload the file every few seconds
    (``update_policy_second``), so weights published many times a second are mostly never read, and each
    write costs a serialisation and a checksum; weights submitted meanwhile wait (the newest
    replacing older ones) until the interval has passed. A run's first weights, ``flush`` and ``close`` do
    not wait.
    """

    def __init__(self, write: Callable[[Any, dict[str, Any], int], None], name: str, min_interval: float = 0.0) -> None:
        self._write = write
        self._min_interval = float(min_interval)
        self._cond = threading.Condition()
        self._pending: tuple[Any, dict[str, Any], int] | None = None
        self._busy = False
        self._stop = False
        self._flushing = 0
        self._last_run: Any = None  # run of the last write, and when the next may start
        self._next_write = 0.0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def due(self, run: Any) -> bool:
        """Whether weights submitted now would not have to wait for ``min_interval`` (read without the lock:
        a stale answer only moves one publish by one ``send_policy_freq``)."""
        return run is not self._last_run or time.monotonic() >= self._next_write

    def submit(self, run: Any, model: dict[str, Any], policy_iter: int) -> None:
        with self._cond:
            self._pending = (run, model, policy_iter)
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Write what is pending now (no interval) and wait until it is written; False on timeout."""
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Write what is pending, then stop the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _loop(self) -> None:
        cond = self._cond
        while True:
            with cond:
                cond.wait_for(lambda: self._pending is not None or self._stop)
                if self._pending is None:
                    return
                while not (self._stop or self._flushing or self._pending[0] is not self._last_run):
                    wait = self._next_write - time.monotonic()
                    if wait <= 0:
                        break
                    cond.wait(wait)
                job, self._pending, self._busy = self._pending, None, True
            try:
                self._write(*job)
            finally:
                with cond:
                    self._busy = False
                    self._last_run = job[0]
                    self._next_write = time.monotonic() + self._min_interval
                    cond.notify_all()


def write_policy_file(path_policy: str, policy_name: str, model: dict[str, Any], policy_iter: int) -> None:
    """Write ``{path_policy}/{policy_name}.safetensors`` (and its manifest).

    ``save_policy`` overwriting the file in place would leave collectors polling it without a manifest
    for the whole write; writing into ``{path_policy}/.staging`` and renaming both files over the old
    ones shrinks the window in which a reader finds a mismatched pair to two renames.
    """
    staging = os.path.join(path_policy, '.staging')
    data = save_policy(staging, policy_name, model, policy_iter)
    os.replace(data, os.path.join(path_policy, os.path.basename(data)))
    manifest = manifest_path(data)
    os.replace(manifest, os.path.join(path_policy, os.path.basename(manifest)))


def cpu_snapshot(model: dict[str, Any]) -> dict[str, Any]:
    """A copy of a model state dict on the CPU, detached: what the learner thread hands to the publisher."""
    return {k: v.detach().to('cpu', copy=True) if isinstance(v, torch.Tensor) else v for k, v in model.items()}


def write_run_policy(run: Any, model: dict[str, Any], policy_iter: int, logger: Any) -> None:
    """Publisher thread: write a learner run's policy file (``run.path_policy`` / ``run.policy_name``), then
    set ``run.published``. A failed write is logged: collectors keep their last weights, training goes on."""
    try:
        write_policy_file(run.path_policy, run.policy_name, model, policy_iter)
    except Exception as exc:
        logger.error(f'learner task {run.task_id}: cannot write the policy to {run.path_policy}: {exc}')
    run.published.set()
