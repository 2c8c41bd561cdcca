"""The one poll-until helper of the tests."""

import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar('T')


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    *,
    interval: float = 0.02,
    what: str = 'the condition',
    proc: subprocess.Popen[Any] | None = None,
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy, and return that.

    Raises AssertionError naming ``what`` when ``timeout`` passes first, or as soon as ``proc`` (a process
    the condition depends on) has exited. The timeout is generous because two cores are shared by many
    processes; a healthy test returns long before it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f'the process exited (code {proc.returncode}) while waiting for {what}')
        if time.monotonic() >= deadline:
            raise AssertionError(f'timed out after {timeout} s waiting for {what}')
        time.sleep(interval)
