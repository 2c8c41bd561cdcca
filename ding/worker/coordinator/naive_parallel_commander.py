"""The ``naive`` commander: a fixed amount of work, then the end of the run (smoke tests, throughput runs)."""

from __future__ import annotations

from typing import Any

from easydict import EasyDict

from ding.utils.registry import COMMANDER_REGISTRY

from .base_parallel_commander import (
    BaseCommander,
    TaskSpace,
    command_info,
    command_policy,
    get_task_uid,
    make_collector_task,
    make_learner_task,
)


@COMMANDER_REGISTRY.register('naive')
class NaiveCommander(BaseCommander):
    """Runs ``learner_task_num`` learner tasks and ``collector_task_num`` collector tasks, no evaluation.

    Collector tasks use ``collect_setting`` as policy kwargs when it is given, otherwise the policy's
    command mode at the learner's current iteration. The run ends (``finish_collector_task`` returns
    True) once every collector task has finished; failed tasks that the coordinator gives up on count
    as finished so that the run cannot hang.
    """

    config = dict(
        collector_task_space=1,
        learner_task_space=1,
        eval_interval=60.0,
        collector_task_num=4,
        learner_task_num=1,
        collect_setting=None,
    )

    def __init__(self, cfg: EasyDict) -> None:
        self._cfg = cfg
        commander_cfg = cfg.policy.other.commander
        self._collector_task_space = TaskSpace(0, int(commander_cfg.get('collector_task_space', 1)))
        self._learner_task_space = TaskSpace(0, int(commander_cfg.get('learner_task_space', 1)))
        self._collector_task_num = int(commander_cfg.get('collector_task_num', 4))
        self._learner_task_num = int(commander_cfg.get('learner_task_num', 1))
        setting = commander_cfg.get('collect_setting', None)
        self._collect_setting = None if setting is None else dict(setting)
        self._policy = command_policy(cfg) if self._collect_setting is None else None

        self._collector_task_count = 0
        self._learner_task_count = 0
        self._collector_task_finish_count = 0
        self._learner_task_finish_count = 0
        self._learner_info: dict[str, Any] = {'learner_step': 0}
        self._total_collector_env_step = 0
        self._current_learner_task_id: str | None = None
        self._current_buffer_id: str | None = None
        self._current_policy_name: str | None = None
        self._end_flag = False
        self.best_eval_return = float('-inf')

    def get_learner_task(self) -> dict | None:
        if self._end_flag or self._learner_task_count >= self._learner_task_num:
            return None
        if not self._learner_task_space.acquire_space():
            return None
        self._learner_task_count += 1
        task_id = f'learner_task_{get_task_uid()}'
        self._current_learner_task_id = task_id
        self._current_buffer_id = f'buffer_{task_id}'
        self._current_policy_name = f'policy_{task_id}'
        return make_learner_task(self._cfg, task_id, self._current_buffer_id, self._current_policy_name)

    def get_collector_task(self) -> dict | None:
        buffer_id, policy_name, learner_task_id = (
            self._current_buffer_id,
            self._current_policy_name,
            self._current_learner_task_id,
        )
        if self._end_flag or buffer_id is None or policy_name is None or learner_task_id is None:
            return None
        if self._collector_task_count >= self._collector_task_num:
            return None
        if not self._collector_task_space.acquire_space():
            return None
        self._collector_task_count += 1
        if self._collect_setting is not None:
            policy_kwargs = dict(self._collect_setting)
        else:
            info = command_info(int(self._learner_info.get('learner_step', 0)), self._total_collector_env_step)
            policy_kwargs = dict(self._policy.get_setting_collect(info))
        task_id = f'collector_task_{get_task_uid()}'
        return make_collector_task(self._cfg, task_id, buffer_id, policy_name, learner_task_id, False, policy_kwargs)

    def _collector_done(self) -> bool:
        self._collector_task_space.release_space()
        self._collector_task_finish_count += 1
        if self._collector_task_finish_count >= self._collector_task_num:
            self._end_reason = f'all {self._collector_task_num} collector tasks are done'
            self._end_flag = True
        return self._end_flag

    def finish_collector_task(self, task_id: str, finished_task: dict) -> bool:
        self._total_collector_env_step += int(finished_task.get('step_count', 0))
        return self._collector_done()

    def finish_learner_task(self, task_id: str, finished_task: dict) -> str | None:
        self._learner_task_space.release_space()
        self._learner_task_finish_count += 1
        buffer_id = finished_task.get('buffer_id', self._current_buffer_id)
        if task_id == self._current_learner_task_id:
            self._current_learner_task_id = self._current_buffer_id = self._current_policy_name = None
        return buffer_id

    def notify_fail_collector_task(self, task: dict) -> None:
        self._collector_done()

    def notify_fail_learner_task(self, task: dict) -> None:
        self.finish_learner_task(task.get('task_id', ''), task)

    def update_learner_info(self, task_id: str, info: dict) -> None:
        self._learner_info = info

    @property
    def total_collector_env_step(self) -> int:
        return self._total_collector_env_step

    @property
    def learner_step(self) -> int:
        return int(self._learner_info.get('learner_step', 0))
