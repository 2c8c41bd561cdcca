"""Helpers shared by the interaction tests: an example slave, fast timings, polling."""

import threading
from typing import Any

from ding.interaction import Slave, TaskFail

# Small spans keep the suite fast; production uses seconds (heartbeat 3 s, tolerance 15 s).
FAST_MASTER = dict(
    heartbeat_tolerance=1.0,
    heartbeat_check_span=0.05,
    request_retries=1,
    request_retry_waiting=0.05,
    request_timeout=5.0,
)
FAST_SLAVE = dict(heartbeat_span=0.1, request_retries=1, request_retry_waiting=0.05, request_timeout=5.0)


class CalcSlave(Slave):
    """
    Example slave. Tasks: ``{'op': 'add', 'a', 'b'}`` -> ``{'sum'}``; ``{'op': 'fail'}`` raises TaskFail;
    ``{'op': 'crash'}`` raises ZeroDivisionError; ``{'op': 'wait'}`` blocks until ``release`` is set.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self.entered = threading.Event()
        self.seen: list[dict[str, Any]] = []

    def _process_task(self, task: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(task)
        op = task.get('op')
        if op == 'add':
            return {'sum': task['a'] + task['b']}
        if op == 'fail':
            raise TaskFail({'reason': 'asked to fail'}, 'failing on purpose')
        if op == 'crash':
            return {'value': 1 / 0}
        if op == 'wait':
            self.entered.set()
            self.release.wait(10)
            return {'waited': True}
        raise TaskFail(message=f'unknown op {op!r}')
