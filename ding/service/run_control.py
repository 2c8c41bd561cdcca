"""Run control of one training run: the pause / resume / tune / terminate state machine and the tune bounds
(the state itself, its status and health: ``run_control_state``, ``RunControl``'s base).

Requests (``request_pause`` ...) come from any thread (the HTTP server's); the training loop calls
``gate()`` (blocking: waits while paused) or ``poll()`` (non-blocking) between iterations. Every change
happens there, so an iteration is never cut in half: a pause lets the in-flight iteration finish, a tune
is applied before the next one starts, a terminate runs ``on_terminate`` (the final checkpoint) and makes
``gate()`` return False.

States: ``running`` -> ``pausing`` (requested, the current iteration drains) -> ``paused`` -> ``running``;
any live state -> ``terminating`` -> ``terminated``; ``finished`` once the run ended on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ding.utils.jsonable import to_jsonable

from .run_control_state import (
    FINISHED,
    PAUSED,
    PAUSING,
    RUNNING,
    STATES,
    TERMINATED,
    TERMINATING,
    RunControlState,
)
from .tune_bounds import TUNE_LIMITS, Tunable, TuneError, canonical_key, check_tune_value, tune_bounds

_ENDED = (TERMINATING, TERMINATED, FINISHED)


class RunStateError(RuntimeError):
    """A request that the run's current state does not allow (e.g. pausing a terminating run)."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.message = message
        self.state = state


class RunControl(RunControlState):
    """Pause / resume / tune / terminate requests for one run, applied between its iterations.

    ``on_terminate()`` (e.g. writing the final checkpoint) runs on the training thread when a terminate is
    honoured; its return value (a dict) is reported to the terminate request and in the event.
    Listeners get every event dict (``event``, ``time``, ``iteration`` and details) on the thread where it
    happened; a listener must not block and must not call back into this object's request methods.
    """

    # ---- requests (any thread) ---------------------------------------------------------------------------
    def request_pause(self, wait: float = 0.0, source: str = 'api') -> dict[str, Any]:
        """Ask the loop to stop after its in-flight iteration; wait up to ``wait`` s until it has."""
        with self._cond:
            state = self._state
            if state in _ENDED:
                raise RunStateError(f'cannot pause: the run is {state}', state)
            changed = state == RUNNING
            if changed:
                self._state = PAUSING
                self._cond.notify_all()
        if changed:
            self._emit('pause_requested', source=source)
        self._wait_for(lambda: self._state != PAUSING, wait)
        return self.summary()

    def request_resume(self, source: str = 'api') -> dict[str, Any]:
        """Continue a paused (or pausing) run; a running run is left as it is."""
        with self._cond:
            state = self._state
            if state in _ENDED:
                raise RunStateError(f'cannot resume: the run is {state}', state)
            changed = state in (PAUSING, PAUSED)
            paused_at = self._paused_at
            if changed:
                self._state = RUNNING
                self._paused_at = None
                self._cond.notify_all()
        if changed:
            self._emit('resume', source=source, paused_at_iteration=paused_at)
        return self.summary()

    def request_terminate(self, wait: float = 0.0, source: str = 'api') -> dict[str, Any]:
        """Ask the loop to write its final checkpoint and stop; wait up to ``wait`` s until it has."""
        with self._cond:
            state = self._state
            if state == FINISHED:
                raise RunStateError('cannot terminate: the run has already finished', state)
            changed = state not in (TERMINATING, TERMINATED)
            if changed:
                self._state = TERMINATING
                self._cond.notify_all()
        if changed:
            self._emit('terminate_requested', source=source)
        self._wait_for(lambda: self._state != TERMINATING, wait)
        out = self.summary()
        if self._terminate_result is not None:
            out['result'] = dict(self._terminate_result)
        return out

    def validate_tune(self, changes: Any) -> dict[str, Any]:
        """The checked, converted changes; ``TuneError`` listing every problem (nothing is applied then)."""
        if not isinstance(changes, Mapping) or not changes:
            raise TuneError('a tune needs a non-empty object of KEY: VALUE changes', 'invalid')
        converted: dict[str, Any] = {}
        problems: list[dict[str, Any]] = []
        for raw_key, value in changes.items():
            key = canonical_key(str(raw_key))
            try:
                converted[key] = check_tune_value(key, value, self._bounds)
                if key not in self._tunables:
                    raise TuneError(
                        f"'{key}' cannot be tuned in this run (the policy or pipeline does not use it); "
                        f'tunable here: {self.tunable_keys}',
                        'not_supported',
                        key,
                        self.bound_of(key),
                    )
            except TuneError as err:
                problems.append({'key': key, 'reason': err.reason, 'bound': err.bound, 'message': err.message})
        if not problems:
            for key, value in converted.items():
                check = self._tunables[key].check
                message = check(value, converted) if check is not None else None
                if message:
                    problems.append({'key': key, 'reason': 'invalid', 'bound': self.bound_of(key), 'message': message})
        if problems:
            first = problems[0]
            text = '; '.join(p['message'] for p in problems)
            raise TuneError(text, first['reason'], first['key'], first['bound'], problems)
        return converted

    def request_tune(self, changes: Mapping[str, Any], wait: float = 0.0, source: str = 'api') -> dict[str, Any]:
        """Validate ``changes`` now (``TuneError`` on any bad one), apply them before the next iteration.

        Waits up to ``wait`` s for the loop to apply them. Returns ``{'ticket', 'applied', 'changes'}``
        (``changes``: key -> {'old', 'new'} once applied, the requested values otherwise).
        """
        try:
            converted = self.validate_tune(changes)
        except TuneError as err:
            self._emit(
                'tune_rejected',
                source=source,
                reason=err.reason,
                key=err.key,
                bound=err.bound,
                message=err.message,
                requested=to_jsonable(changes, 'repr', finite=True),
            )
            raise
        with self._cond:
            state = self._state
            if state in _ENDED:
                raise RunStateError(f'cannot tune: the run is {state}', state)
            ticket = self._next_ticket
            self._next_ticket += 1
            self._pending.append((ticket, converted))
            self._has_pending = True
            self._cond.notify_all()
        self._emit('tune_requested', source=source, ticket=ticket, requested=converted)
        self._wait_for(lambda: ticket in self._results or self._state in _ENDED, wait)
        with self._cond:
            result = self._results.pop(ticket, None)
        if result is None:
            return {'ticket': ticket, 'applied': False, 'changes': converted}
        return dict(result, ticket=ticket)

    def _wait_for(self, predicate: Callable[[], bool], wait: float) -> None:
        if wait and wait > 0:
            with self._cond:
                self._cond.wait_for(predicate, timeout=wait)

    # ---- the training loop's side ------------------------------------------------------------------------
    def note_progress(self, iteration: int) -> None:
        """The loop advanced (called every iteration: plain attribute writes, no lock)."""
        self.iteration = iteration
        self.last_progress = self.last_heartbeat = self._clock()
        self.progressed = True

    def poll(self, iteration: int | None = None) -> str:
        """Between iterations, without blocking: apply pending tunes, turn ``pausing`` into ``paused`` and
        ``terminating`` into ``terminated`` (running ``on_terminate``). Returns the state after that."""
        if iteration is not None:
            self.iteration = iteration
        self.last_heartbeat = self._clock()
        for beat in self.heartbeat_listeners:
            beat()
        if self._has_pending:
            self._apply_pending()
        state = self._state
        if state == PAUSING:
            with self._cond:
                if self._state == PAUSING:
                    self._state = PAUSED
                    self._paused_at = self.iteration
                    self._cond.notify_all()
                state = self._state
            if state == PAUSED:
                self._emit('paused', paused_at_iteration=self._paused_at)
        elif state == TERMINATING:
            self._terminate()
            state = self._state
        return state

    def gate(self, iteration: int | None = None) -> bool:
        """Between iterations: True to go on, False to stop (terminated). Blocks while paused, keeping the
        heartbeat fresh and applying tunes sent meanwhile."""
        if iteration is not None:
            self.iteration = iteration
        self.last_heartbeat = self._clock()
        if self._state == RUNNING and not self._has_pending:  # the common case: nothing to do
            return True
        while True:
            state = self.poll()
            if state == RUNNING:
                return True
            if state in (TERMINATED, FINISHED):
                return False
            with self._cond:
                if self._state == PAUSED and not self._has_pending:
                    self._cond.wait(self.heartbeat_seconds)

    def _apply_pending(self) -> None:
        with self._cond:
            batch, self._pending = self._pending, []
            self._has_pending = False
        for ticket, changes in batch:
            applied: dict[str, dict[str, Any]] = {}
            errors: dict[str, str] = {}
            for key, value in changes.items():
                tunable = self._tunables[key]
                try:
                    old = tunable.getter()
                    tunable.setter(value)
                    applied[key] = {
                        'old': to_jsonable(old, 'repr', finite=True),
                        'new': to_jsonable(tunable.getter(), 'repr', finite=True),
                    }
                except Exception as exc:  # a failed setter must not stop training; it is reported
                    errors[key] = f'{type(exc).__name__}: {exc}'
            result: dict[str, Any] = {'applied': not errors, 'changes': applied, 'iteration': self.iteration}
            if errors:
                result['errors'] = errors
            self._emit('tune' if not errors else 'tune_failed', ticket=ticket, changes=applied, errors=errors or None)
            with self._cond:
                self._results[ticket] = result
                while len(self._results) > 100:  # results nobody waited for
                    self._results.pop(next(iter(self._results)))
                self._cond.notify_all()

    def _terminate(self) -> None:
        result: dict[str, Any] = {}
        try:
            if self.on_terminate is not None:
                result = dict(self.on_terminate() or {})
        except Exception as exc:  # still stop: the caller asked for it; report what failed
            result = {'error': f'{type(exc).__name__}: {exc}'}
        with self._cond:
            self._state = TERMINATED
            self._terminate_result = result
            self._cond.notify_all()
        self._emit('terminated', **result)

    def mark_finished(self, reason: str) -> None:
        """The run ended by itself (solved, limits reached, error): no further requests are taken."""
        with self._cond:
            if self._state in (TERMINATED, FINISHED):
                return
            self._state = FINISHED
            self._end_reason = reason
            self._cond.notify_all()
        self._emit('finished', reason=reason)


__all__ = [
    'RunControl',
    'RunStateError',
    'TuneError',
    'Tunable',
    'TUNE_LIMITS',
    'tune_bounds',
    'check_tune_value',
    'canonical_key',
    'STATES',
    'RUNNING',
    'PAUSING',
    'PAUSED',
    'TERMINATING',
    'TERMINATED',
    'FINISHED',
]
