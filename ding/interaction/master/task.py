"""A task sent by a master to a slave: start it, wait for it, react to its completion or failure."""

import logging
import threading
import time
import uuid
from collections.abc import Callable
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import requests

from ..exception import ResponseException

if TYPE_CHECKING:
    from .connection import SlaveConnectionProxy

logger = logging.getLogger(__name__)

TaskCallback = Callable[[dict[str, Any], dict[str, Any]], Any]


class TaskStatus(IntEnum):
    """Life cycle of a Task: IDLE -> STARTING -> STARTED -> TASK_COMPLETED | TASK_FAILED."""

    IDLE = 0x00  # created, not sent
    STARTING = 0x11  # being sent to the slave
    STARTED = 0x12  # accepted by the slave, running there
    TASK_COMPLETED = 0x21
    TASK_FAILED = 0x22  # failed on the slave, refused, timed out, connection lost, or could not be sent

    # DI-engine's names
    COMPLETED = 0x21
    FAILED = 0x22


_FINISHED = (TaskStatus.TASK_COMPLETED, TaskStatus.TASK_FAILED)


class Task:
    """
    One task on one connection. Chainable:
    ``conn.new_task({'name': 'resource'}).on_complete(f).on_fail(g).start().join()``.
    Callbacks are called as ``callback(task_data, result)``; ``result`` is the dict the slave returned, or on
    failure a dict holding at least ``'message'``. When the task ends, its callbacks run first, then ``join()``
    returns. A callback registered after the end runs at once (when it matches the outcome).
    """

    def __init__(
        self,
        connection: 'SlaveConnectionProxy',
        data: dict[str, Any],
        timeout: float | None = None,
        task_id: str | None = None,
    ):
        self._connection = connection
        self._data = data
        self._timeout = timeout
        self._id = task_id or str(uuid.uuid4())
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._status = TaskStatus.IDLE
        self._result: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._on_complete: list[TaskCallback] = []
        self._on_fail: list[TaskCallback] = []
        self._deadline: float | None = None  # time.monotonic() deadline (``deadline``)

    # --- properties -------------------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self._id

    @property
    def data(self) -> dict[str, Any]:
        """The task data sent to the slave."""
        return self._data

    task = data  # DI-engine's name

    @property
    def status(self) -> TaskStatus:
        return self._status

    @property
    def result(self) -> dict[str, Any] | None:
        """The slave's result (completed), the failure dict (failed), None before the end."""
        return self._result

    @property
    def error(self) -> BaseException | None:
        """The exception that stopped ``start()`` from handing the task over (e.g. ``SlaveTaskRefused``)."""
        return self._error

    @property
    def timeout(self) -> float | None:
        return self._timeout

    @property
    def connection(self) -> 'SlaveConnectionProxy':
        return self._connection

    @property
    def deadline(self) -> float | None:
        """``time.monotonic()`` time after which the master fails the task (None: no timeout, or not started)."""
        return self._deadline

    def is_done(self) -> bool:
        return self._status in _FINISHED

    # --- public -----------------------------------------------------------------------------------------
    def start(self) -> 'Task':
        """
        Send the task to the slave (returns once the slave accepted it; the task then runs there).
        If it cannot be handed over (refused, slave busy, not connected, network error) the task ends
        TASK_FAILED at once, ``error`` holds the exception and ``on_fail`` callbacks run; nothing is raised,
        except ``TypeError`` when the data is not JSON-serializable (the task stays IDLE then).
        """
        with self._lock:
            if self._status != TaskStatus.IDLE:
                raise ValueError(f'task {self._id} can only be started once (status {self._status.name})')
            self._status = TaskStatus.STARTING
            if self._timeout is not None:
                self._deadline = time.monotonic() + self._timeout
        try:
            self._connection.send_task(self)
        except TypeError:
            with self._lock:
                self._status, self._deadline = TaskStatus.IDLE, None
            raise
        except (requests.RequestException, RuntimeError) as err:
            message = err.message if isinstance(err, ResponseException) else str(err)
            result: dict[str, Any] = {'message': f'task could not be started on {self._connection.name!r}: {message}'}
            if isinstance(err, ResponseException) and err.code is not None:
                result['code'] = err.code
            self.finish(TaskStatus.TASK_FAILED, result, error=err, threaded=False)
            return self
        with self._lock:
            if self._status == TaskStatus.STARTING:
                self._status = TaskStatus.STARTED
        return self

    def join(self, timeout: float | None = None) -> 'Task':
        """Wait until the task completed or failed (and its callbacks ran), at most ``timeout`` seconds."""
        if self._status == TaskStatus.IDLE:
            raise ValueError(f'task {self._id} was never started; call start() before join()')
        self._done.wait(timeout)
        return self

    def on_complete(self, callback: TaskCallback) -> 'Task':
        """Add ``callback(task_data, result)`` to run when the task completes."""
        return self._add_callback(callback, self._on_complete, TaskStatus.TASK_COMPLETED)

    def on_fail(self, callback: TaskCallback) -> 'Task':
        """Add ``callback(task_data, result)`` to run when the task fails."""
        return self._add_callback(callback, self._on_fail, TaskStatus.TASK_FAILED)

    # --- internals --------------------------------------------------------------------------------------
    def _add_callback(self, callback: TaskCallback, callbacks: list[TaskCallback], status: TaskStatus) -> 'Task':
        if not callable(callback):
            raise TypeError(f'task callback must be callable, got {callback!r}')
        with self._lock:
            if self._status not in _FINISHED:
                callbacks.append(callback)
                return self
            run_now = self._status == status
        if run_now:
            self._run_callbacks([callback], set_done=False)
        return self

    # --- used by the connection and the master of this package --------------------------------------------
    def finish(
        self, status: TaskStatus, result: dict[str, Any], error: BaseException | None = None, threaded: bool = True
    ) -> bool:
        """End the task once; returns False when it had already ended. Callbacks run on their own thread.
        Called by the connection and the master when the slave answers, the link drops or the task times out."""
        with self._lock:
            if self._status in _FINISHED:
                return False
            self._status, self._result, self._error = status, result, error
            callbacks = list(self._on_complete if status == TaskStatus.TASK_COMPLETED else self._on_fail)
        if status == TaskStatus.TASK_FAILED:
            logger.info('task %s on %r failed: %s', self._id, self._connection.name, result.get('message'))
        if threaded:
            # Never run user callbacks on a request thread or the heartbeat checker: they may be slow.
            threading.Thread(
                target=self._run_callbacks, args=(callbacks,), name='ding-master-task-callback', daemon=True
            ).start()
        else:
            self._run_callbacks(callbacks)
        return True

    # --- internals --------------------------------------------------------------------------------------
    def _run_callbacks(self, callbacks: list[TaskCallback], set_done: bool = True) -> None:
        result = self._result if self._result is not None else {}  # set by finish() before any callback runs
        try:
            for callback in callbacks:
                try:
                    callback(self._data, result)
                except Exception:
                    logger.exception('callback %r of task %s raised', callback, self._id)
        finally:
            if set_done:
                self._done.set()

    def __repr__(self) -> str:
        return f'Task(id={self._id}, connection={self._connection.name!r}, status={self._status.name})'
