"""Learner hooks that feed the run service (register them on any ``BaseLearner`` with ``register_hook``).

- ``MetricsHook`` (after_iter, priority 15: before the log-show hook clears the log buffer): counts the
  iteration, copies the losses to the metrics, marks progress for ``/healthz``, writes a ``train`` JSON
  event every ``json_every`` iterations.
- ``PublishWeightsHook`` (before_run / after_iter every ``freq`` / after_run): publishes the policy
  weights to a ``WeightsStore`` for ``GET /weights/current``.
- ``RunControlHook`` (after_iter, last): honours pause / tune / terminate between iterations of a learner
  driven by ``learner.start()`` (the parallel learner); it blocks while paused.
- ``TimedCheckpointHook``: wraps a save-checkpoint hook to time the checkpoints it writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

from ding.worker.learner.learner_hook import LearnerHook, SaveCkptHook, iterations_done

from .json_log import JsonEventLog
from .run_control import RunControl

# Fields of a JSON event that a policy's log value must not overwrite.
_RESERVED = ('iteration', 'envstep', 'time', 'event')


class MetricsHook(LearnerHook):
    """Feeds one iteration's numbers to the metrics, the progress clock and the JSON event log."""

    def __init__(
        self,
        name: str = 'service_metrics',
        priority: float = 15,
        position: str = 'after_iter',
        metrics: Any = None,
        control: RunControl | None = None,
        events: JsonEventLog | None = None,
        json_every: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, position=position, **kwargs)
        self.metrics = metrics
        self.control = control
        self.events = events
        self.json_every = int(json_every or 0)

    def __call__(self, engine: Any) -> None:
        done = iterations_done(engine)
        scalars = engine.log_buffer['scalar']
        if self.metrics is not None:
            self.metrics.observe_iteration(done, scalars)
        if self.control is not None:
            self.control.note_progress(done)
        if self.events is not None and self.json_every and done % self.json_every == 0:
            values = {
                k: v
                for k, v in scalars.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in _RESERVED
            }
            self.events.emit('train', iteration=done, envstep=engine.collector_envstep, **values)


def model_weights(engine: Any) -> dict[str, Any]:
    """What collectors load: ``{'model': model.state_dict()}`` (no optimizer or target network)."""
    policy = engine.policy
    try:
        model = policy.get_attribute('model')
    except AttributeError:
        model = None
    if model is not None and hasattr(model, 'state_dict'):
        return {'model': model.state_dict()}
    return {'model': policy.state_dict()['model']}


class PublishWeightsHook(LearnerHook):
    """Publishes the weights as version ``iterations done``: at before_run / after_run, or after_iter every
    ``freq`` iterations (0: never periodically) and whenever a reader asked for fresh weights
    (``store.wanted``). Only rank 0 publishes."""

    def __init__(
        self,
        name: str,
        priority: float = 90,
        position: str = 'after_iter',
        store: Any = None,
        freq: int = 1,
        extract: Callable[[Any], dict[str, Any]] = model_weights,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, position=position, **kwargs)
        if store is None:
            raise ValueError(f"learner hook '{name}': a WeightsStore is required")
        if isinstance(freq, bool) or not isinstance(freq, int) or freq < 0:
            raise ValueError(f"learner hook '{name}': freq must be an integer >= 0, got {freq!r}")
        self.store = store
        self.freq = freq
        self.extract = extract

    def __call__(self, engine: Any) -> None:
        if engine.rank != 0:
            return
        done = iterations_done(engine)
        if self.position == 'after_iter' and not self.store.wanted and (not self.freq or done % self.freq):
            return
        self.store.publish(self.extract(engine), done)


class RunControlHook(LearnerHook):
    """At the end of each iteration (after_iter, after the other hooks): apply pending tunes, wait while
    paused, and on terminate, once ``control.on_terminate`` (e.g. the final checkpoint, which then holds
    this completed iteration) has run, call ``on_terminate(engine)``: the owner of the loop stops it there
    (e.g. ends its task), so no iteration runs after the final checkpoint."""

    def __init__(
        self,
        name: str = 'run_control',
        priority: float = 95,
        position: str = 'after_iter',
        control: RunControl | None = None,
        on_terminate: Callable[[Any], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, position=position, **kwargs)
        if control is None:
            raise ValueError(f"learner hook '{name}': a RunControl is required")
        self.control = control
        self.on_terminate = on_terminate
        self._terminated = False

    def __call__(self, engine: Any) -> None:
        if not self.control.gate(iterations_done(engine)) and not self._terminated:
            self._terminated = True
            if self.on_terminate is not None:
                self.on_terminate(engine)


class TimedCheckpointHook(LearnerHook):
    """Runs a save-checkpoint hook and reports how long each checkpoint it writes took to each of ``observe``
    (one callable or several: the metrics' histogram, the tracer's span)."""

    def __init__(
        self, inner: LearnerHook, observe: Callable[[float], None] | Sequence[Callable[[float], None]]
    ) -> None:
        super().__init__(inner.name, inner.priority, position=inner.position)
        self.inner = inner
        self.observers = list(observe) if isinstance(observe, Sequence) else [observe]

    def __call__(self, engine: Any) -> None:
        before = getattr(engine, 'last_checkpoint', None)
        t0 = perf_counter()
        self.inner(engine)
        if getattr(engine, 'last_checkpoint', None) is not before:  # write_checkpoint records every checkpoint
            seconds = perf_counter() - t0
            for observe in self.observers:
                observe(seconds)


def time_checkpoint_hooks(learner: Any, observe: Callable[[float], None] | Sequence[Callable[[float], None]]) -> int:
    """Wrap the learner's save-checkpoint hooks in ``TimedCheckpointHook``; returns how many."""
    n = 0
    for hooks in learner.hooks.values():
        for i, hook in enumerate(hooks):
            if isinstance(hook, SaveCkptHook):
                hooks[i] = TimedCheckpointHook(hook, observe)
                n += 1
    return n


__all__ = [
    'MetricsHook',
    'PublishWeightsHook',
    'RunControlHook',
    'TimedCheckpointHook',
    'model_weights',
    'time_checkpoint_hooks',
]
