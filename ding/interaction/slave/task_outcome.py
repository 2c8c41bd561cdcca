"""What a slave reports of one task (``task_outcome``): 'complete' with the dict ``_process_task`` returned, or
'fail' with the result a ``TaskFail`` / ``TaskRefuse`` carries or the message of any other error."""

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from .action import TaskFail, TaskRefuse

logger = logging.getLogger(__name__)


def task_outcome(
    process: Callable[[dict[str, Any]], Any], data: dict[str, Any], task_id: str, owner: str
) -> tuple[str, dict[str, Any]]:
    """Run ``process(data)`` (the ``_process_task`` of the slave class named ``owner``) and return ``(kind,
    result)``: the report to the master's ``/slave/task/<kind>``, its result always JSON-serializable."""
    kind, result = 'complete', {}
    try:
        answer = process(data)
        if answer is None:
            answer = {}
        if not isinstance(answer, Mapping):
            raise TypeError(f'_process_task must return a dict, got {type(answer).__name__}')
        result = dict(answer)
    except TaskFail as fail:
        kind, result = 'fail', fail.result
        result.setdefault('message', fail.message)
    except TaskRefuse as refuse:
        kind, result = 'fail', refuse.data
        result.setdefault('message', refuse.message)
        result['refused'] = True
    except Exception as err:
        logger.exception('task %s raised in %s._process_task', task_id, owner)
        kind, result = 'fail', {'message': f'{type(err).__name__}: {err}'}
    try:
        json.dumps(result)
    except (TypeError, ValueError) as err:
        kind, result = 'fail', {'message': f'task result is not JSON-serializable: {err}'}
    return kind, result
