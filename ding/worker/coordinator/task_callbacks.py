"""The coordinator's answers to its workers' task events: collector tasks sending sample metadata, learner tasks
asking for batches and reporting their learn info, tasks finishing or failing, collectors added or removed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .data_plane import DataPlane
from .learner_group import LearnerGroups
from .run_state import LearnProgress
from .scheduler import TaskScheduler

__all__ = ['TASK_CALLBACKS', 'TaskCallbacks']

# The coordinator's methods the comm coordinator calls back as tasks progress (by these names).
TASK_CALLBACKS = (
    'deal_with_collector_send_data',
    'deal_with_collector_judge_finish',
    'deal_with_collector_finish_task',
    'deal_with_collector_fail_task',
    'deal_with_learner_get_data',
    'deal_with_learner_send_info',
    'deal_with_learner_judge_finish',
    'deal_with_learner_finish_task',
    'deal_with_learner_fail_task',
    'deal_with_increase_collector',
    'deal_with_decrease_collector',
    'learner_task_extra',
)


class TaskCallbacks:
    """The ``deal_with_*`` callbacks of :class:`~ding.worker.coordinator.coordinator.Coordinator` (mixed into it),
    which the :class:`CommCoordinator` calls as tasks progress: the data goes to the :class:`DataPlane`, the
    verdicts come from the commander, finished and failed tasks go back to the :class:`TaskScheduler`.

    The coordinator builds the parts declared below and decides the end of the run (``_check_limits``,
    ``_end_for_commander``, ``_collection_over``)."""

    _commander: Any
    _commander_lock: threading.RLock
    _data: DataPlane
    _groups: LearnerGroups
    _scheduler: TaskScheduler
    _progress: LearnProgress
    _log_every_iter: int
    info: Callable[[str], None]
    _check_limits: Callable[[], None]
    _end_for_commander: Callable[[], None]
    _collection_over: Callable[[], bool]

    # ---- collector callbacks ---------------------------------------------------------------------
    def deal_with_collector_send_data(self, task_id: str, buffer_id: str, data: list[dict]) -> None:
        """Push the sample metadata of one collector answer into its learner task's buffer."""
        self._data.push(task_id, buffer_id, data)

    def deal_with_collector_judge_finish(self, task_id: str, info: dict) -> bool:
        with self._commander_lock:
            return self._commander.judge_collector_finish(task_id, info)

    def deal_with_collector_finish_task(self, task_id: str, finished_task: dict) -> None:
        """A collector task ended normally; its finish info may end the whole run."""
        self._scheduler.task_finished(task_id)
        with self._commander_lock:
            shutdown = self._commander.finish_collector_task(task_id, finished_task)
        kind = 'evaluator' if finished_task.get('eval_flag') else 'collector'
        self.info(
            f'{kind} task {task_id} finished: episodes {finished_task.get("episode_count")}, steps '
            f'{finished_task.get("step_count")}, reward_mean {finished_task.get("reward_mean")}'
        )
        if shutdown and self._groups.draining():
            # data-parallel learners on consumed-once data: the run ends once they trained what is left
            self.info('the collection is over; the learners train the samples left in their queues')
        elif shutdown:
            self._end_for_commander()
        else:
            self._check_limits()
        self._scheduler.notify_change()

    def deal_with_collector_fail_task(
        self, task: dict, reason: str, config_error: bool = False, storage_error: bool = False
    ) -> None:
        """The collector running ``task`` died or failed it: give the task to another collector, or give up;
        ``config_error``: it refused the task for its config, ``storage_error``: the disk refused one of its
        files; either ends the run."""
        self._scheduler.task_failed(task, reason, 'collector', config_error=config_error, storage_error=storage_error)

    # ---- learner callbacks -----------------------------------------------------------------------
    def deal_with_learner_get_data(
        self, task_id: str, buffer_id: str, batch_size: int, cur_learner_iter: int
    ) -> list[dict] | None:
        """``batch_size`` metadata for the learner (stale ones filtered by the buffer), or None if too few yet."""
        return self._data.sample(buffer_id, batch_size, cur_learner_iter)

    def deal_with_learner_send_info(self, task_id: str, buffer_id: str, info: dict) -> None:
        """One training iteration's learn info: priorities to the buffer, progress to the commander."""
        priority_info = info.get('priority_info')
        if priority_info:
            self._data.update_priority(buffer_id, priority_info)
        with self._commander_lock:
            self._commander.update_learner_info(task_id, info)
        count = self._progress.record(info)
        if self._data.max_samples_per_iter is not None:
            self._data.notify()  # paced collectors may go on
        if count % self._log_every_iter == 0:
            self.info(
                f'learner task {task_id}: {self._progress.describe()}, buffer {self._data.buffer_size(buffer_id)}'
            )
        self._check_limits()

    def deal_with_learner_judge_finish(self, task_id: str, info: dict) -> bool:
        with self._commander_lock:
            return self._commander.judge_learner_finish(task_id, info)

    def deal_with_learner_finish_task(self, task_id: str, finished_task: dict) -> None:
        """A learner task ended normally (e.g. ``max_iterations``): its buffer is closed."""
        self._scheduler.task_finished(task_id)
        with self._commander_lock:
            buffer_id = self._commander.finish_learner_task(task_id, finished_task)
        self.info(f'learner task {task_id} finished')
        for one in self._groups.buffers_of(buffer_id) if buffer_id is not None else []:
            self._data.close_buffer(one)
        self._scheduler.notify_change()
        if self._collection_over() and not self._groups.draining():
            self._end_for_commander()  # e.g. data-parallel learners trained every sample of a finite run

    def deal_with_learner_fail_task(
        self, task: dict, reason: str, config_error: bool = False, storage_error: bool = False
    ) -> None:
        """The learner running ``task`` died or failed it: give it to another learner (resuming), or give up;
        ``config_error``: it refused the task for its config, ``storage_error``: the disk refused a checkpoint
        or policy file; either ends the run."""
        self._scheduler.task_failed(task, reason, 'learner', config_error=config_error, storage_error=storage_error)

    # ---- elastic collectors ----------------------------------------------------------------------
    def deal_with_increase_collector(self) -> None:
        with self._commander_lock:
            self._commander.increase_collector_task_space()

    def deal_with_decrease_collector(self) -> None:
        with self._commander_lock:
            self._commander.decrease_collector_task_space()
