"""Exceptions a Slave subclass raises from its hooks to refuse a request or fail a task."""

from collections.abc import Mapping
from typing import Any

from ..base.envelope import ResponsibleException
from ..exception import SlaveErrorCode


class ConnectionRefuse(ResponsibleException):
    """
    Raised in ``Slave._before_connection`` to refuse a master: it gets HTTP 403 with code
    SLAVE_CONNECTION_REFUSED (``SlaveSlaveConnectionRefused`` client-side) carrying ``data`` and ``message``.
    """

    def __init__(self, data: Mapping[str, Any] | None = None, message: str = 'Connection refused.'):
        super().__init__(SlaveErrorCode.SLAVE_CONNECTION_REFUSED, message, data)


class DisconnectionRefuse(ResponsibleException):
    """Raised in ``Slave._before_disconnection`` to stay connected (code SLAVE_DISCONNECTION_REFUSED)."""

    def __init__(self, data: Mapping[str, Any] | None = None, message: str = 'Disconnection refused.'):
        super().__init__(SlaveErrorCode.SLAVE_DISCONNECTION_REFUSED, message, data)


class TaskRefuse(ResponsibleException):
    """
    Refuse a task. Raised in ``Slave._before_task`` the refusal is the answer to ``/task/new`` (HTTP 403,
    code TASK_REFUSED): the master's task fails at ``start()``. Raised in ``_process_task`` it is reported
    as a task failure whose result carries ``refused: True``.
    """

    def __init__(self, data: Mapping[str, Any] | None = None, message: str = 'Task refused.'):
        super().__init__(SlaveErrorCode.TASK_REFUSED, message, data)


class TaskFail(Exception):
    """
    Raised in ``Slave._process_task`` to report failure. The master's task ends TASK_FAILED with
    ``result`` (a JSON-object dict) as its result; ``message`` fills ``result['message']`` when absent.
    """

    def __init__(self, result: Mapping[str, Any] | None = None, message: str | None = None):
        super().__init__(message or 'Task failed.')
        self.result = dict(result or {})
        self.message = message or 'Task failed.'
