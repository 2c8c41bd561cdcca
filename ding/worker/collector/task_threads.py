"""The threads of a parallel collector task: the env step observer that stops a task between two env steps,
and the writer that turns sample chunks into files while the envs keep stepping."""

from __future__ import annotations

import queue
import threading
from typing import Any

from .base_serial_collector import episode_return_of


class CollectorStopped(Exception):
    """Raised from env stepping once the task is closed; it unwinds a running collect or eval call."""


class EnvStepObserver:
    """Env manager proxy handed to the serial collector / evaluator in place of the manager.

    ``step`` counts the env steps (abnormal ones excluded), the finished episodes and their
    ``eval_episode_return``; every other attribute is the manager's. Once ``stop_event`` is set the next
    ``step`` raises :class:`CollectorStopped` instead of stepping.
    """

    def __init__(self, env: Any, stop_event: threading.Event) -> None:
        self._env = env
        self._stop_event = stop_event
        self.step_count = 0
        self.episode_count = 0
        self.episode_returns: list[float] = []

    def rebind(self, stop_event: threading.Event) -> None:
        """Serve a new task: its stop event, counters from zero (the envs go on where they were)."""
        self._stop_event = stop_event
        self.step_count = 0
        self.episode_count = 0
        self.episode_returns = []

    def step(self, actions: dict[int, Any]) -> dict[int, Any]:
        if self._stop_event.is_set():
            raise CollectorStopped()
        timesteps = self._env.step(actions)
        steps = 0
        for timestep in timesteps.values():
            info = timestep.info
            if info.get('abnormal', False):
                continue
            steps += 1
            if timestep.done:
                self.episode_count += 1
                ret = episode_return_of(info)
                if ret is not None:
                    self.episode_returns.append(ret)
        self.step_count += steps
        return timesteps

    @property
    def env(self) -> Any:
        """The wrapped env manager."""
        return self._env

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found on the proxy: everything else is the manager's.
        if name.startswith('__') or name in ('_env', '_stop_event'):
            raise AttributeError(name)
        return getattr(self._env, name)


class ChunkWriter:
    """Runs ``write(chunk)`` for each chunk on its own thread; ``put`` runs at most ``max_pending`` chunks ahead.

    ``put`` waits while that many chunks are pending (the collector never runs far ahead of the disk or the
    coordinator) and raises :class:`CollectorStopped` once ``stop_event`` is set. An exception in ``write``
    ends the thread; the next ``put`` or ``finish`` raises it on the caller's thread. ``write`` raising
    ``CollectorStopped`` just ends the thread (the task was closed).
    """

    _END = object()

    def __init__(self, write: Any, stop_event: threading.Event, name: str, max_pending: int = 1) -> None:
        self._write = write
        self._stop_event = stop_event
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._abort = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def put(self, chunk: Any) -> None:
        self._offer(chunk)

    def finish(self, timeout: float | None = None) -> None:
        """Write what is pending, then end the thread; raises the error of a failed write."""
        self._offer(self._END)
        self._thread.join(timeout)
        self._raise_error()

    def close(self, timeout: float | None = None) -> bool:
        """End the thread without writing what is pending (the chunk being written completes); True once ended."""
        self._abort.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f'writing samples failed: {type(self._error).__name__}: {self._error}') from self._error

    def _offer(self, item: Any) -> None:
        while True:
            if self._stop_event.is_set() or self._abort.is_set() or not self._thread.is_alive():
                self._raise_error()  # the thread ended because a write failed: say why
                raise CollectorStopped()
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def _loop(self) -> None:
        while not (self._stop_event.is_set() or self._abort.is_set()):
            try:
                item = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if item is self._END:
                return
            try:
                self._write(item)
            except CollectorStopped:
                return
            except BaseException as exc:  # noqa: B902 -- handed to the collector thread
                self._error = exc
                return


__all__ = ['ChunkWriter', 'CollectorStopped', 'EnvStepObserver']
