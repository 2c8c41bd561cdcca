"""The state of one run's control and what it reports: the state machine's states, the tunables, the progress
times, the recent events and listeners; ``status()`` and ``health()``. ``RunControl`` (``run_control``) builds
on it with the requests that change the state and the training loop's side that applies them."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ding.utils.jsonable import to_jsonable

from .tune_bounds import Tunable, TuneCheck, tune_bounds

RUNNING, PAUSING, PAUSED = 'running', 'pausing', 'paused'
TERMINATING, TERMINATED, FINISHED = 'terminating', 'terminated', 'finished'
STATES = (RUNNING, PAUSING, PAUSED, TERMINATING, TERMINATED, FINISHED)


class RunControlState:
    """A run's control state (see the module doc); its ``__init__`` takes ``RunControl``'s arguments."""

    def __init__(
        self,
        stuck_seconds: float = 300.0,
        heartbeat_seconds: float = 0.5,
        on_terminate: Callable[[], dict[str, Any] | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(stuck_seconds, bool) or not isinstance(stuck_seconds, (int, float)) or not stuck_seconds > 0:
            raise ValueError(f'RunControl: stuck_seconds must be a positive number, got {stuck_seconds!r}')
        self.stuck_seconds = float(stuck_seconds)
        self.heartbeat_seconds = float(heartbeat_seconds)
        self.on_terminate = on_terminate
        self._clock = clock
        self._cond = threading.Condition()
        self._emit_lock = threading.Lock()
        self._state = RUNNING
        self._bounds = tune_bounds()
        self._tunables: dict[str, Tunable] = {}
        self._pending: list[tuple[int, dict[str, Any]]] = []
        self._has_pending = False  # read without the lock on the training thread's fast path
        self._results: dict[int, dict[str, Any]] = {}
        self._next_ticket = 1
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        # Called at every poll, i.e. every heartbeat_seconds while paused (e.g. to refresh a metric).
        self.heartbeat_listeners: list[Callable[[], None]] = []
        self._events: deque[dict[str, Any]] = deque(maxlen=50)
        # name -> fn() giving a part's state for status and health (e.g. 'checkpoint': the uploader's); a state
        # with a 'degraded' string (e.g. 'checkpoint_stalled') turns a healthy 'ok' into that status.
        self.reporters: dict[str, Callable[[], dict[str, Any]]] = {}
        self._paused_at: int | None = None
        self._terminate_result: dict[str, Any] | None = None
        self._end_reason: str | None = None
        now = clock()
        self.started = now
        self.last_progress = now
        self.last_heartbeat = now
        self.iteration = 0
        self.progressed = False  # True once the loop reported progress

    # ---- wiring ----------------------------------------------------------------------------------------
    def register_tunable(
        self,
        key: str,
        getter: Callable[[], Any],
        setter: Callable[[Any], None],
        check: TuneCheck | None = None,
    ) -> None:
        """Make ``key`` (one of ``TUNE_LIMITS``) changeable in this run."""
        if key not in self._bounds:
            raise ValueError(f"register_tunable: '{key}' has no tune bound; tunable keys are {sorted(self._bounds)}")
        self._tunables[key] = Tunable(getter, setter, check)

    def add_listener(self, listener: Callable[[dict[str, Any]], None]) -> None:
        self._listeners.append(listener)

    @property
    def state(self) -> str:
        return self._state

    def getters(self) -> dict[str, Callable[[], Any]]:
        """``{key: getter}`` of the tunable keys (e.g. for metrics read at scrape time)."""
        return {k: t.getter for k, t in sorted(self._tunables.items())}

    @property
    def tunable_keys(self) -> list[str]:
        return sorted(self._tunables)

    @property
    def terminate_requested(self) -> bool:
        return self._state in (TERMINATING, TERMINATED)

    def bound_of(self, key: str) -> str:
        return str(self._bounds[key][1])

    # ---- events ------------------------------------------------------------------------------------------
    def _emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {'event': event, 'time': self._clock(), 'iteration': self.iteration, 'state': self._state}
        record.update(fields)
        with self._emit_lock:
            self._events.append(record)
            for listener in self._listeners:
                listener(record)
        return record

    def record_event(self, event: str, **fields: Any) -> dict[str, Any]:
        """Log an event that changes nothing (e.g. a refused request) to the listeners."""
        return self._emit(event, **fields)

    def recent_events(self, n: int = 20) -> list[dict[str, Any]]:
        with self._emit_lock:
            return list(self._events)[-n:]

    # ---- reading ---------------------------------------------------------------------------------------
    def hyperparameters(self) -> dict[str, Any]:
        out = {}
        for key, tunable in sorted(self._tunables.items()):
            try:
                out[key] = to_jsonable(tunable.getter(), 'repr', finite=True)
            except Exception as exc:  # a getter of a half-built object: show it, do not fail the status
                out[key] = f'<unavailable: {exc}>'
        return out

    def summary(self) -> dict[str, Any]:
        return {'state': self._state, 'iteration': self.iteration, 'paused_at_iteration': self._paused_at}

    def status(self) -> dict[str, Any]:
        now = self._clock()
        with self._cond:
            pending = [dict(ticket=t, changes=c) for t, c in self._pending]
        out = self.summary()
        out.update(
            {
                'last_progress_age_seconds': round(now - self.last_progress, 3),
                'heartbeat_age_seconds': round(now - self.last_heartbeat, 3),
                'uptime_seconds': round(now - self.started, 3),
                'hyperparameters': self.hyperparameters(),
                'tunable': {k: self.bound_of(k) for k in self.tunable_keys},
                'pending_tunes': pending,
                'events': self.recent_events(),
            }
        )
        out.update(self._reports())
        if self._terminate_result is not None:
            out['terminate_result'] = dict(self._terminate_result)
        if self._end_reason is not None:
            out['end_reason'] = self._end_reason
        return out

    def health(self) -> tuple[bool, dict[str, Any]]:
        """(healthy, body). Healthy while the loop advanced within ``stuck_seconds`` or is paused on purpose."""
        now = self._clock()
        state = self._state
        age = now - self.last_progress
        body = {
            'state': state,
            'iteration': self.iteration,
            'last_progress_age_seconds': round(age, 3),
            'heartbeat_age_seconds': round(now - self.last_heartbeat, 3),
            'bound_seconds': self.stuck_seconds,
        }
        if state == PAUSED:
            return True, dict(body, status='paused', reason=f'paused on request at iteration {self._paused_at}')
        if state in (TERMINATING, TERMINATED, FINISHED):
            return True, dict(body, status=state, reason=f'the run is {state}')
        if age > self.stuck_seconds:
            what = 'no iteration completed' if self.progressed else 'no iteration completed since start'
            return False, dict(body, status='stuck', reason=f'{what} for {age:.1f} s (bound {self.stuck_seconds:g} s)')
        status = 'ok' if self.progressed else 'starting'
        reason = 'the training loop is advancing' if self.progressed else 'waiting for the first iteration'
        reports = self._reports()
        body.update(reports)
        for name, report in reports.items():
            degraded = report.get('degraded')
            if isinstance(degraded, str) and degraded:
                # Still healthy (200): training advances; a restart would not bring the storage back.
                status, reason = degraded, f'{reason}, but {name}: {report.get("reason") or degraded}'
        return True, dict(body, status=status, reason=reason)

    def _reports(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, fn in list(self.reporters.items()):
            try:
                out[name] = dict(fn())
            except Exception as exc:  # a status must not fail because one part cannot answer right now
                out[name] = {'error': f'{type(exc).__name__}: {exc}'}
        return out


__all__ = [
    'RunControlState',
    'STATES',
    'RUNNING',
    'PAUSING',
    'PAUSED',
    'TERMINATING',
    'TERMINATED',
    'FINISHED',
]
