"""SIGINT / SIGTERM during ``BaseLearner.start()``: the learner's handler replaces the process's for the run
(main thread only: Python delivers signals there) and the previous ones come back afterwards."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
Handlers = dict[signal.Signals, Any]


def install_stop_handlers(handler: Callable[[int, Any], None]) -> Handlers | None:
    """Route the stop signals to ``handler``; returns the handlers it replaced (None off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}


def restore_handlers(previous: Handlers | None) -> None:
    """Put back what ``install_stop_handlers`` replaced."""
    if previous:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


__all__ = ['STOP_SIGNALS', 'install_stop_handlers', 'restore_handlers']
