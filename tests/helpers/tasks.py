"""Sending one interaction task to a comm worker from a test's master connection and checking how it ended."""

from typing import Any

from ding.interaction.master.task import TaskStatus


def run_task(conn: Any, data: dict[str, Any], timeout: float = 30.0) -> Any:
    """Send one task and wait for its end; returns the finished Task."""
    task = conn.new_task(data).start().join(timeout)
    assert task.is_done(), f'task {data.get("name")} did not finish within {timeout}s'
    return task


def ok(conn: Any, data: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Send one task that must complete; returns its result."""
    task = run_task(conn, data, timeout)
    assert task.status == TaskStatus.TASK_COMPLETED, f'task {data.get("name")} failed: {task.result}'
    return task.result


def failed(conn: Any, data: dict[str, Any], timeout: float = 30.0) -> str:
    """Send one task that must fail; returns the failure message."""
    task = run_task(conn, data, timeout)
    assert task.status == TaskStatus.TASK_FAILED, f'task {data.get("name")} should fail, got {task.result}'
    return task.result['message']
