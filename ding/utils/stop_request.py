"""Ctrl-C and SIGTERM during a run: recorded by the signal handler, acted on by the run loop at a safe point.

Raising ``KeyboardInterrupt`` from a signal handler lands wherever the main thread happens to be, including
between a lock's acquire and the ``try`` that releases it (inside ``logging``, ``threading.Condition``,
``threading.Event``): the lock then stays held and every other thread that needs it blocks for ever, so a
stopping run can hang. Here the handler only records the signal (one attribute store, no lock); the run loop
calls :meth:`StopRequest.check` between iterations and while it polls its queues, and that raises
``KeyboardInterrupt`` in plain code. A second signal raises at once (the way out when a loop is stuck).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Whether a stop signal arrived during the run (``signum``), and the check that acts on it."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` when a stop was requested; the caller's ``except`` then stops the run."""
        if self.signum is not None:
            raise KeyboardInterrupt(f'signal {self.signum}')

    def handle(self, signum: int, frame: Any) -> None:
        """The signal handler: record the first signal; a second one stops at once."""
        if self.signum is not None:
            raise KeyboardInterrupt(f'signal {signum} (second stop signal)')
        self.signum = signum


@contextlib.contextmanager
def signals_request_stop(request: StopRequest) -> Iterator[StopRequest]:
    """While the block runs, Ctrl-C and SIGTERM set ``request`` (then the previous handlers are back). Outside
    the main thread signals cannot be handled, and nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {sig: signal.signal(sig, request.handle) for sig in STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ['StopRequest', 'signals_request_stop', 'STOP_SIGNALS']
