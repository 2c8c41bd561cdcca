"""``LearnerSlave``: the learner process's interaction slave (routes the coordinator's tasks to the comm learner)."""

from __future__ import annotations

from typing import Any

from ding.interaction import CallbackSlave


class LearnerSlave(CallbackSlave):
    """The learner process's interaction slave: routes the coordinator's tasks to the comm learner.

    ``callback_fn`` maps ``deal_with_resource``, ``deal_with_learner_start``, ``deal_with_get_data``,
    ``deal_with_learner_learn`` and ``deal_with_learner_close`` to callables; ``deal_with_lost_master``
    (optional) is called when the coordinator disconnects or stops answering heartbeats.
    """

    TASKS = {
        'resource': 'deal_with_resource',
        'learner_start_task': 'deal_with_learner_start',
        'learner_get_data_task': 'deal_with_get_data',
        'learner_learn_task': 'deal_with_learner_learn',
        'learner_close_task': 'deal_with_learner_close',
    }
    ROLE = 'learner'

    def _process_task(self, task: dict[str, Any]) -> dict[str, Any]:
        name, fn = self._route(task)
        task_info = task.get('task_info') or {}
        if name == 'resource':
            return fn()
        if name == 'learner_learn_task':
            return fn(task_info, task.get('data'))
        return fn(task_info)

    def _lost_connection(self, master_address: str, err: Exception) -> None:
        self._lost_master(master_address, err)

    def _after_disconnection(
        self, status_code: int, success: bool, code: int, message: str, data: dict[str, Any]
    ) -> None:
        # A coordinator that disconnects has given up this worker's task (it fails and moves it).
        if success:
            self._lost_master('the coordinator', 'it disconnected')


__all__ = ['LearnerSlave']
