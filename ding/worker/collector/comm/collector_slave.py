"""``CollectorSlave``: the collector process's interaction slave (routes the coordinator's tasks to the comm
collector)."""

from __future__ import annotations

from typing import Any

from ding.interaction import CallbackSlave, TaskFail


class CollectorSlave(CallbackSlave):
    """The collector process's interaction slave: routes the coordinator's tasks to the comm collector.

    ``callback_fn`` maps ``deal_with_resource``, ``deal_with_collector_start``, ``deal_with_collector_data``
    and ``deal_with_collector_close`` to callables; ``deal_with_lost_master`` (optional) is called with a
    reason when the coordinator disconnects or stops answering heartbeats.
    """

    TASKS = {
        'resource': 'deal_with_resource',
        'collector_start_task': 'deal_with_collector_start',
        'collector_data_task': 'deal_with_collector_data',
        'collector_close_task': 'deal_with_collector_close',
    }
    ROLE = 'collector'

    def _process_task(self, task: dict[str, Any]) -> dict[str, Any]:
        name, fn = self._route(task)
        if name == 'resource':
            return fn()
        task_info = task.get('task_info')
        if not isinstance(task_info, dict):
            raise TaskFail({'name': name}, f"{name}: 'task_info' must be a dict, got {task_info!r}")
        return fn(task_info)

    def _after_disconnection(
        self, status_code: int, success: bool, code: int, message: str, data: dict[str, Any]
    ) -> None:
        if success:
            self._lost_master('the coordinator disconnected')

    def _lost_connection(self, master_address: str, err: Exception) -> None:
        self._lost_master(f'lost the coordinator at {master_address}: {err}')
