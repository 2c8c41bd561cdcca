"""Structured event log: one JSON object per line (``./{exp_name}/log/events.jsonl``).

Every line carries ``time`` (unix seconds), ``ts`` (ISO 8601, UTC), ``run_id``, ``instance``,
``iteration``, ``config_hash`` and ``event``, then the event's own fields. It sits beside the
human-readable logs; tools (``jq``, log shippers) read it without parsing free text.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

EVENTS_FILE = 'events.jsonl'


def events_path(exp_name: str) -> str:
    """Where a run's JSON events go: ``./{exp_name}/log/events.jsonl``."""
    return os.path.join('.', exp_name, 'log', EVENTS_FILE)


def _clean(value: Any) -> Any:
    # JSON has no NaN / inf: non-finite floats become strings so every line stays valid JSON.
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    item = getattr(value, 'item', None)  # numpy / torch scalars
    if callable(item):
        try:
            return _clean(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


class JsonEventLog:
    """Appends events to a JSON-lines file; thread-safe, each line flushed as it is written.

    ``iteration`` is read from ``iteration_fn`` when an event does not give one.
    """

    def __init__(
        self,
        path: str,
        run_id: str,
        instance: str = 'learner',
        config_hash: str = '',
        iteration_fn: Callable[[], int] | None = None,
    ) -> None:
        self.path = path
        self.run_id = run_id
        self.instance = instance
        self.config_hash = config_hash
        self._iteration_fn = iteration_fn
        self._lock = threading.Lock()
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._file: TextIO | None = open(path, 'a', encoding='utf-8', buffering=1)  # line-buffered: one write per event

    def emit(self, event: str, iteration: int | None = None, **fields: Any) -> dict[str, Any]:
        """Write one event line and return the record."""
        now = fields.pop('time', None) or time.time()
        if iteration is None and self._iteration_fn is not None:
            try:
                iteration = int(self._iteration_fn())
            except Exception:  # an event must be logged even when the counter cannot be read
                iteration = None
        record = {
            'time': round(float(now), 6),
            'ts': datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(timespec='milliseconds'),
            'run_id': self.run_id,
            'instance': self.instance,
            'iteration': iteration,
            'config_hash': self.config_hash,
            'event': event,
        }
        for key, value in fields.items():
            if key not in record:
                record[key] = _clean(value)
        line = json.dumps(record, separators=(',', ':'), allow_nan=False)
        with self._lock:
            if self._file is not None:
                self._file.write(line + '\n')
        return record

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @property
    def closed(self) -> bool:
        return self._file is None


def read_events(path: str) -> list:
    """Every event of a JSON-lines file, in order (for tests and tools)."""
    with open(path, encoding='utf-8') as f:
        return [json.loads(line) for line in f if line.strip()]


__all__ = ['JsonEventLog', 'events_path', 'read_events', 'EVENTS_FILE']
