"""Scheduling of a parallel run: ask the commander for learner and collector tasks, hand them to idle
workers, and put a task whose worker died back in line (or give it up)."""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from .data_plane import DataPlane
from .service_control import CoordinatorControl

TASK_KINDS = ('learner', 'collector')


class TaskState:
    """A task handed to a worker: its id and since when."""

    def __init__(self, task_id: str, worker: str | None = None) -> None:
        self.task_id = task_id
        self.worker = worker
        self.start_time = time.time()


class TaskScheduler:
    """The produce / assign threads of both task kinds and the retries of failed tasks.

    ``produce_*`` threads ask the commander for new tasks and queue them; ``assign_*`` threads hand queued
    tasks to idle workers through ``send_task[kind]`` (the comm coordinator's ``send_*_task``). A task that
    finds no idle worker within ``*_task_timeout`` seconds is given up and reported to the commander. A
    task whose worker dies goes back into its queue (at most ``task_retries`` times) after ``retry_delay``
    seconds; a learner task keeps its replay buffer and resumes from its newest checkpoint.
    """

    def __init__(
        self,
        coor_cfg: EasyDict,
        commander: Any,
        commander_lock: threading.RLock,
        data: DataPlane,
        control: CoordinatorControl,
        send_task: dict[str, Callable[[dict], bool]],
        train_iter: Callable[[], int],
        end_run: Callable[[str], None],
        info: Callable[[str], None],
        error: Callable[[str], None],
        http_weights: bool,
    ) -> None:
        self._timeouts = {k: float(coor_cfg[f'{k}_task_timeout']) for k in TASK_KINDS}
        self._task_retries = int(coor_cfg.task_retries)
        self._retry_delay = float(coor_cfg.retry_delay)
        self._commander = commander
        self._commander_lock = commander_lock
        self._data = data
        self._control = control
        self._send_task = send_task
        self._train_iter = train_iter
        self._end_run = end_run
        self._info = info
        self._error = error
        # collectors fetching weights over HTTP from the address the learner reports (none configured)
        self._http_weights = http_weights
        self._weights_address: str | None = None
        self._queues: dict[str, queue.Queue] = {k: queue.Queue() for k in TASK_KINDS}
        self._task_state: dict[str, TaskState] = {}
        self._historical_task: deque[str] = deque(maxlen=1000)
        self._retries: dict[str, int] = {}
        self._carried_resume: dict[str, Any] | None = None  # a given-up learner task's progress, for the next one
        self._changed = threading.Condition()
        self._threads: list[threading.Thread] = []
        self.stopped = True
        self._stats_lock = threading.Lock()
        self.failed_tasks: list[dict[str, Any]] = []
        # why a worker refused a task for its config (the run then ended), else None
        self.config_refusal: str | None = None
        # why the run ended because a worker could not write a file (the path, what was not saved), else None
        self.storage_refusal: str | None = None

    # ---- threads -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the produce / assign threads."""
        self.stopped = False
        targets: tuple[tuple[Callable[[], None], str], ...] = (
            (lambda: self._produce('learner'), 'produce_learner'),
            (self._assign_learner_task, 'assign_learner'),
            (lambda: self._produce('collector'), 'produce_collector'),
            (self._assign_collector_task, 'assign_collector'),
        )
        for target, name in targets:
            t = threading.Thread(target=target, name=f'coordinator_{name}', daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """No new tasks from now on; the threads end within a moment."""
        self.stopped = True
        self.notify_change()

    def join(self, timeout: float) -> None:
        for t in self._threads:
            t.join(timeout=timeout)

    def notify_change(self) -> None:
        """Something the threads wait for changed (a worker came or went, a task ended, the run paused...)."""
        with self._changed:
            self._changed.notify_all()

    def _wait_change(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def _produce(self, kind: str) -> None:
        task_queue = self._queues[kind]
        while not self.stopped:
            if self._control.paused:  # run control: no new tasks while paused
                self._wait_change(0.2)
                continue
            with self._commander_lock:
                task = self._commander.get_learner_task() if kind == 'learner' else self._commander.get_collector_task()
            if task is None:
                # Commanders decide on time (e.g. the eval interval) as well as on events: poll slowly.
                self._wait_change(0.2)
                continue
            self._info(f'{kind} task {task["task_id"]} queued')
            task_queue.put((task, time.time()))

    def _next_task(self, kind: str) -> tuple[dict, float] | None:
        try:
            return self._queues[kind].get(timeout=0.2)
        except queue.Empty:
            return None

    def _give_up_if_late(self, kind: str, task: dict, put_time: float) -> bool:
        """Give ``task`` up (True) when no worker took it within the task timeout since it was queued."""
        timeout = self._timeouts[kind]
        if time.time() - put_time < timeout:
            return False
        self._error(f'{kind} task {task["task_id"]}: no {kind} took it within {timeout}s, giving up')
        self._give_up(kind, task)
        return True

    def _hand_over(self, kind: str, task: dict) -> bool:
        self._task_state[task['task_id']] = TaskState(task['task_id'])
        if self._send_task[kind](task):
            self._info(f'{kind} task {task["task_id"]} handed to {task.get(f"{kind}_id")}')
            return True
        self._task_state.pop(task['task_id'], None)
        return False

    def _assign_learner_task(self) -> None:
        while not self.stopped:
            queued = self._next_task('learner')
            if queued is None:
                continue
            task, put_time = queued
            self._carry_progress_into(task)
            while not self.stopped and not self._give_up_if_late('learner', task, put_time):
                self._control.add_service_fields(task)
                self._data.ensure_buffer(task)
                if self._hand_over('learner', task):
                    break
                self._wait_change(0.5)

    def _assign_collector_task(self) -> None:
        while not self.stopped:
            queued = self._next_task('collector')
            if queued is None:
                continue
            task, put_time = queued
            while not self.stopped and not self._give_up_if_late('collector', task, put_time):
                has_buffer, buffer_closed = self._data.buffer_status(task['buffer_id'])
                if buffer_closed:
                    # Its learner task is over: the data would have nowhere to go.
                    self._give_up('collector', task)
                    break
                if has_buffer and self._http_weights and not self._weights_address:
                    has_buffer = False  # wait until the learner said where it serves its weights
                if has_buffer:
                    if self._http_weights:  # collectors with policy_transport='http' fetch from there
                        task['weights_address'] = self._weights_address
                    if self._hand_over('collector', task):
                        break
                self._wait_change(0.5)

    # ---- task outcomes -----------------------------------------------------------------------------
    def learner_started(self, task: dict, answer: dict) -> None:
        """A learner took a start task; its answer may name its run service (``weights_address``)."""
        address = answer.get('weights_address') if isinstance(answer, dict) else None
        if address and address != self._weights_address:
            self._weights_address = address
            self._info(f'learner {task.get("learner_id")} serves its weights at {address}')

    def task_finished(self, task_id: str) -> None:
        self._task_state.pop(task_id, None)
        self._retries.pop(task_id, None)
        self._historical_task.append(task_id)

    def task_failed(
        self, task: dict, reason: str, kind: str, config_error: bool = False, storage_error: bool = False
    ) -> None:
        """The worker running ``task`` died or failed it: give it to another worker (resuming), or give up.

        ``config_error``: the worker refused the task because of the config; every worker would, so the run
        ends with that reason (``config_refusal``) instead of retrying the task for ever. ``storage_error``: the
        worker could not write a file (disk full, unwritable directory); a retry would write to the same place,
        so the run ends naming the path and what was not saved (``storage_refusal``).
        """
        task_id = task['task_id']
        self._task_state.pop(task_id, None)
        record = {
            'task_id': task_id,
            'kind': kind,
            'worker': task.get(f'{kind}_id'),
            'reason': reason,
            'time': time.time(),
            'config_error': config_error,
            'storage_error': storage_error,
        }
        with self._stats_lock:
            self.failed_tasks.append(record)
        if self.stopped:
            return
        if config_error:
            self._end_for_config(kind, task, reason)
            return
        if storage_error:
            self._end_for_storage(kind, task, reason)
            return
        tries = self._retries.get(task_id, 0) + 1
        self._retries[task_id] = tries
        if tries > self._task_retries:
            self._error(f'{kind} task {task_id} failed {tries} times, giving up: {reason}')
            self._give_up(kind, task)
            return
        self._error(
            f'{kind} task {task_id} failed on {task.get(f"{kind}_id")} ({reason}); reassigning (attempt {tries + 1})'
        )
        task = dict(task)
        task.pop(f'{kind}_id', None)
        task.pop('resource_info', None)
        if kind == 'learner':
            task['resume'] = self._control.retry_resume(task, self._train_iter())
        # A short pause before the retry: a worker that refuses a task at once must not make a busy loop.
        timer = threading.Timer(self._retry_delay, self._requeue, args=(kind, task))
        timer.daemon = True
        timer.start()

    def _end_for_config(self, kind: str, task: dict, reason: str) -> None:
        with self._stats_lock:
            first = self.config_refusal is None
            if first:
                self.config_refusal = f'{kind} task {task["task_id"]} was refused for its config: {reason}'
        if first:
            self._error(f'{self.config_refusal}; ending the run (a retry would be refused the same way)')
            self._end_run(self.config_refusal or reason)
        self.stop()

    def _end_for_storage(self, kind: str, task: dict, reason: str) -> None:
        with self._stats_lock:
            first = self.storage_refusal is None and self.config_refusal is None
            if first:
                self.storage_refusal = f'{kind} task {task["task_id"]} could not write a file: {reason}'
        if first:
            self._error(f'{self.storage_refusal}; ending the run (a retry would write to the same place)')
            self._end_run(self.storage_refusal or reason)
        self.stop()

    def _requeue(self, kind: str, task: dict) -> None:
        if not self.stopped:
            self._queues[kind].put((task, time.time()))
            self.notify_change()

    def _give_up(self, kind: str, task: dict) -> None:
        self._task_state.pop(task['task_id'], None)
        if kind == 'learner':
            # The next learner task continues this one's training (its newest checkpoint of this run, else its
            # last published weights), never from iteration 0; the learner logs what could not be kept.
            carried = self._control.retry_resume(task, self._train_iter())
            carried['weights_from'] = carried.pop('policy_name', None)
            self._carried_resume = carried
            with self._commander_lock:
                self._commander.notify_fail_learner_task(task)
            self._data.close_buffer(task['buffer_id'])
        else:
            with self._commander_lock:
                self._commander.notify_fail_collector_task(task)
                ended = self._commander.end_flag
            if ended:
                self._end_run(getattr(self._commander, 'end_reason', '') or 'the commander ended the run')
        self.notify_change()

    def _carry_progress_into(self, task: dict) -> None:
        carried, self._carried_resume = self._carried_resume, None
        if carried is not None and not task.get('resume'):
            task['resume'] = carried
            self._info(f'learner task {task["task_id"]} resumes the given-up task at iteration {carried["last_iter"]}')

    def failed_task_records(self) -> list[dict[str, Any]]:
        with self._stats_lock:
            return list(self.failed_tasks)
