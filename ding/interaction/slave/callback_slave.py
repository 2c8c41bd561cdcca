"""A slave whose tasks are routed by name to callbacks: the shape of the comm learner's and collector's slaves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .action import TaskFail
from .slave import Slave


class CallbackSlave(Slave):
    """``TASKS`` maps each task name to the name of a callback in ``callback_fn``; unknown names fail the task.

    ``callback_fn`` may also hold ``deal_with_lost_master``, called through :meth:`_lost_master` when the
    master disconnects or stops answering heartbeats.
    """

    TASKS: dict[str, str] = {}
    ROLE = 'slave'  # how the worker names itself in error messages

    def __init__(self, host: str, port: int, callback_fn: dict[str, Any], **slave_kwargs: Any) -> None:
        super().__init__(host, port, **slave_kwargs)
        missing = [name for name in self.TASKS.values() if not callable(callback_fn.get(name))]
        if missing:
            raise KeyError(f'{type(self).__name__}: callback_fn lacks {missing}')
        self._callback_fn = callback_fn

    def _route(self, task: dict[str, Any]) -> tuple[str, Callable[..., Any]]:
        """The task's name and the callback that handles it."""
        name = task.get('name')
        callback = self.TASKS.get(name) if isinstance(name, str) else None
        if not isinstance(name, str) or callback is None:
            raise TaskFail(
                {'name': name}, f'{self.ROLE} slave: unknown task name {name!r}; known tasks are {sorted(self.TASKS)}'
            )
        return name, self._callback_fn[callback]

    def _lost_master(self, *args: Any) -> None:
        fn = self._callback_fn.get('deal_with_lost_master')
        if fn is not None:
            fn(*args)
