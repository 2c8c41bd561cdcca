"""Publishing a learner's weights as the policy file collectors read: on a thread of its own, newest first,
at most once per interval (``PolicyPublisher``), as one self-verifying file renamed over the old one
(``write_policy_file``)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

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


def write_policy_file(path_policy: str, policy_name: str, model: dict[str, Any], policy_iter: int) -> str:
    """Write ``{path_policy}/{policy_name}.safetensors`` with one rename (``save_policy``): a learner killed at
    any moment leaves the previous or the new file, both verifiable, so a restarted learner and the collectors
    always find usable weights. Returns the path."""
    return save_policy(path_policy, policy_name, model, policy_iter)


def cpu_snapshot(model: dict[str, Any]) -> dict[str, Any]:
    """A copy of a model state dict on the CPU, detached: what the learner thread hands to the publisher."""
    return {k: v.detach().to('cpu', copy=True) if isinstance(v, torch.Tensor) else v for k, v in model.items()}


def write_run_policy(run: Any, model: dict[str, Any], policy_iter: int, logger: Any) -> None:
    """Publisher thread: write a learner run's policy file (``run.path_policy`` / ``run.policy_name``), then
    set ``run.published``. A file the disk refuses (full, read-only, a file where the directory should be) ends
    the run (``LearnerRun.storage_failed``): collectors would train on ever older weights, so the coordinator
    ends the run naming the path and the iteration not published. Any failure is logged at ERROR once per cause."""
    path = os.path.join(run.path_policy, run.policy_name + '.safetensors')
    try:
        write_policy_file(run.path_policy, run.policy_name, model, policy_iter)
    except Exception as exc:
        cause = f'{type(exc).__name__}: {getattr(exc, "strerror", None) or exc}'
        message = (
            f'cannot write the policy file {path} ({cause}); the weights of iteration {policy_iter} were NOT published'
        )
        if run.publish_error != cause:
            logger.error(f'learner task {run.task_id}: {message}')
        run.publish_error = cause
        if isinstance(exc, OSError):
            run.storage_failed(message)
    else:
        if run.publish_error is not None:
            logger.warning(f'learner task {run.task_id}: policy file {path} written again (iteration {policy_iter})')
        run.publish_error = None
    run.published.set()
