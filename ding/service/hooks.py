"""Learner hooks that feed the run service, and the glue that gives a training run its service.

Hooks (register them on any ``BaseLearner`` with ``learner.register_hook``):

- ``MetricsHook`` (after_iter, priority 15: before the log-show hook clears the log buffer): counts the
  iteration, copies the losses to the metrics, marks progress for ``/healthz``, writes a ``train`` JSON
  event every ``json_every`` iterations.
- ``PublishWeightsHook`` (before_run / after_iter every ``freq`` / after_run): publishes the policy
  weights to a ``WeightsStore`` for ``GET /weights/current``.
- ``RunControlHook`` (after_iter, last): honours pause / tune / terminate between iterations of a learner
  driven by ``learner.start()`` (the parallel learner); it blocks while paused.
- ``TimedCheckpointHook``: wraps a save-checkpoint hook to time the checkpoints it writes.

``ServiceRuntime`` bundles one run's ``RunControl``, ``ServiceMetrics``, ``WeightsStore``,
``JsonEventLog`` and ``ServiceServer``. ``attach_serial_service(parts)`` sets one up for a serial
pipeline from ``cfg.service``.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from ding.worker.learner.learner_hook import LearnerHook, SaveCkptHook, iterations_done
from ding.worker.learner.nan_guard import add_nan_guard_listener

from . import check_service_config
from .json_log import JsonEventLog, events_path
from .run_control import TERMINATED, RunControl

RUN_FILE = 'run.json'


def new_run_id() -> str:
    """A run id unique enough to tell runs apart in logs and metrics: time plus 6 random hex digits."""
    return time.strftime('%Y%m%d-%H%M%S') + '-' + secrets.token_hex(3)


def run_file_path(exp_name: str) -> str:
    return os.path.join('.', exp_name, RUN_FILE)


def write_run_file(path: str, info: Mapping[str, Any]) -> None:
    """Write ``info`` as JSON readable by the owner only (mode 0600: it holds the control token)."""
    directory = os.path.dirname(path) or '.'
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f'.{os.path.basename(path)}.{os.getpid()}.tmp')
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            json.dump(dict(info), f, indent=1)
            f.write('\n')
        os.chmod(tmp, 0o600)  # O_CREAT's mode is filtered by the umask; make sure nobody else can read it
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def read_run_file(path: str) -> dict[str, Any]:
    with open(path, encoding='utf-8') as f:
        return json.load(f)


# Fields of a JSON event that a policy's log value must not overwrite.
_RESERVED = ('iteration', 'envstep', 'time', 'event')


# ---- hooks -----------------------------------------------------------------------------------------------
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


def _model_weights(engine: Any) -> dict[str, Any]:
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
        extract: Callable[[Any], dict[str, Any]] = _model_weights,
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
    """Runs a save-checkpoint hook and reports how long each checkpoint it writes took."""

    def __init__(self, inner: LearnerHook, observe: Callable[[float], None]) -> None:
        super().__init__(inner.name, inner.priority, position=inner.position)
        self.inner = inner
        self.observe = observe

    def __call__(self, engine: Any) -> None:
        before = getattr(engine, '_last_ckpt', None)
        t0 = perf_counter()
        self.inner(engine)
        if getattr(engine, '_last_ckpt', None) is not before:  # write_checkpoint records every checkpoint
            self.observe(perf_counter() - t0)


def time_checkpoint_hooks(learner: Any, observe: Callable[[float], None]) -> int:
    """Wrap the learner's save-checkpoint hooks in ``TimedCheckpointHook``; returns how many."""
    n = 0
    for hooks in learner.hooks.values():
        for i, hook in enumerate(hooks):
            if isinstance(hook, SaveCkptHook):
                hooks[i] = TimedCheckpointHook(hook, observe)
                n += 1
    return n


# ---- the runtime -------------------------------------------------------------------------------------------
class ServiceRuntime:
    """One run's service parts. ``cfg`` is the ``service`` config section (see ``ding.service``).

    ``enable`` builds metrics, the weights store (unless ``serve_weights=False``, e.g. in a coordinator)
    and the HTTP server; ``json_log`` the JSON event log; the ``RunControl`` always exists (the HTTP
    server is its only remote entry point). ``log``: where human-readable event lines go.
    """

    def __init__(
        self,
        cfg: Mapping[str, Any] | None,
        exp_name: str,
        instance: str = 'learner',
        config_hash: str = '',
        run_id: str | None = None,
        log: Callable[[str], None] | None = None,
        serve_weights: bool = True,
    ) -> None:
        self.cfg = check_service_config(cfg)
        self.exp_name = exp_name
        self.instance = instance
        self.config_hash = config_hash
        self.run_id = run_id or new_run_id()
        self._log = log
        self.control = RunControl(stuck_seconds=self.cfg.health_stuck_seconds)
        self.metrics = None
        self.weights = None
        self.server = None
        self.events: JsonEventLog | None = None
        self.run_file: str | None = None
        self._closed = False
        self._ended = False
        self._learner: Any = None
        self._extract: Callable[[Any], dict[str, Any]] = _model_weights
        if self.cfg.json_log:
            self.events = JsonEventLog(
                events_path(exp_name), self.run_id, instance, config_hash, iteration_fn=lambda: self.control.iteration
            )
        if self.cfg.enable:
            from .metrics import ServiceMetrics, inc_nan_guard_event

            self.metrics = ServiceMetrics(self.run_id, exp_name, instance, config_hash).activate()
            add_nan_guard_listener(inc_nan_guard_event)  # the guard's events count into the active run
            self.control.heartbeat_listeners.append(self.metrics.beat)  # keeps beating while paused
            if serve_weights:
                from .weights import WeightsStore

                self.weights = WeightsStore(latest_version=lambda: self.control.iteration)
                self.weights.add_listener(self._on_publish)
        self.control.add_listener(self._on_control_event)

    # ---- events --------------------------------------------------------------------------------------
    def log(self, text: str) -> None:
        if self._log is not None:
            self._log(text)

    def emit(self, event: str, **fields: Any) -> None:
        """An event for the JSON log and the human-readable log."""
        if self.events is not None:
            self.events.emit(event, **fields)
        details = ' '.join(f'{k}={v}' for k, v in fields.items() if v is not None and k != 'iteration')
        self.log(f'[service] {event} {details}'.rstrip())

    def _on_control_event(self, record: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.control_event(record)
        fields = {k: v for k, v in record.items() if k not in ('event', 'time')}
        self.emit(record['event'], **fields)
        if record['event'] == 'paused' and self.weights is not None and self._learner is not None:
            # On the training thread, between iterations: a paused run serves exactly the weights it has.
            self.publish_weights(self._learner)

    def _on_publish(self, ok: bool, published: Any, error: str | None) -> None:
        if self.metrics is None:
            return
        if ok:
            self.metrics.weights_published_ok(published.version, published.size)
        else:
            self.metrics.weights_publish_failed()
            self.emit('weights_publish_failed', error=error)

    # ---- wiring --------------------------------------------------------------------------------------
    def attach_learner(
        self,
        learner: Any,
        control_hook: bool = False,
        on_terminate: Callable[[Any], None] | None = None,
        extract: Callable[[Any], dict[str, Any]] = _model_weights,
        learn_cfg: Any = None,
    ) -> None:
        """Register the metrics / weights hooks on ``learner`` (and ``RunControlHook`` with
        ``control_hook``, for learners driven by ``learner.start()``); time its checkpoints; make the
        learning rate tunable (also written to ``learn_cfg.learning_rate`` when given)."""
        self._learner = learner
        self._extract = extract
        learner.register_hook(
            MetricsHook(
                metrics=self.metrics, control=self.control, events=self.events, json_every=self.cfg.json_log_every
            )
        )
        if self.weights is not None:
            learner.register_hook(
                PublishWeightsHook(
                    'publish_weights_before_run', position='before_run', store=self.weights, extract=extract
                )
            )
            learner.register_hook(
                PublishWeightsHook(
                    'publish_weights',
                    position='after_iter',
                    store=self.weights,
                    freq=self.cfg.weights_freq,
                    extract=extract,
                )
            )
            learner.register_hook(
                PublishWeightsHook(
                    'publish_weights_after_run', position='after_run', store=self.weights, extract=extract
                )
            )
        if self.metrics is not None:
            time_checkpoint_hooks(learner, self.metrics.observe_checkpoint)
        if control_hook:
            learner.register_hook(RunControlHook(control=self.control, on_terminate=on_terminate))
        self.register_learning_rate(learner.policy, learn_cfg)

    def register_learning_rate(self, learn_mode: Any, cfg_section: Any | None = None) -> None:
        """Make ``learning_rate`` tunable: every param group of the policy's optimizers."""
        from ding.worker.learner.nan_guard import DEFAULT_OPTIMIZER_NAMES

        optimizers = []
        for name in DEFAULT_OPTIMIZER_NAMES:
            try:
                opt = learn_mode.get_attribute(name)
            except AttributeError:
                continue
            if opt is not None and hasattr(opt, 'param_groups'):
                optimizers.append(opt)
        if not optimizers:
            return

        def get() -> float:
            return float(optimizers[0].param_groups[0]['lr'])

        def set_(value: float) -> None:
            for opt in optimizers:
                for group in opt.param_groups:
                    group['lr'] = float(value)
            if cfg_section is not None:
                cfg_section.learning_rate = float(value)

        self.control.register_tunable('learning_rate', get, set_)

    def register_tunable(
        self,
        key: str,
        getter: Callable[[], Any],
        setter: Callable[[Any], None],
        check: Callable[[Any, Mapping[str, Any]], str | None] | None = None,
    ) -> None:
        """``control.register_tunable`` plus the ``learner_hyperparameter{key}`` gauge."""
        self.control.register_tunable(key, getter, setter, check)
        if self.metrics is not None:
            self.metrics.track_hyperparameters({key: getter})

    def publish_weights(self, learner: Any) -> None:
        if self.weights is not None and learner.rank == 0:
            self.weights.publish(self._extract(learner), iterations_done(learner))

    def terminate_with_checkpoint(self, learner: Any) -> dict[str, Any]:
        """``on_terminate`` for a learner: write the final checkpoint (timed), publish the final weights."""
        t0 = perf_counter()
        path = learner.save_checkpoint()
        seconds = perf_counter() - t0
        if self.metrics is not None and path is not None:
            self.metrics.observe_checkpoint(seconds)
        self.publish_weights(learner)
        return {
            'checkpoint': path,
            'checkpoint_iteration': iterations_done(learner),
            'checkpoint_seconds': round(seconds, 4),
        }

    def start_server(self, run_file: str | None = RUN_FILE) -> None:
        """Start the HTTP server (when enabled), write ``./{exp_name}/{run_file}`` (None: no file) and say
        where it is. One process per experiment owns ``run.json`` (what ``ding ctl --exp-dir`` reads): the
        serial pipeline, or the coordinator in parallel mode; other processes pick another name."""
        if not self.cfg.enable or self.server is not None:
            return
        from .http import ServiceServer

        token = self.cfg.token or secrets.token_hex(16)
        info = {
            'run_id': self.run_id,
            'exp_name': self.exp_name,
            'instance': self.instance,
            'pid': os.getpid(),
            'config_hash': self.config_hash,
        }
        server = ServiceServer(self.cfg.host, self.cfg.port, token, self.control, self.metrics, self.weights, info)
        server.start()
        self.server = server
        where = ''
        if run_file:
            self.run_file = os.path.join('.', self.exp_name, run_file)
            write_run_file(
                self.run_file, dict(info, address=server.address, url=server.url, token=token, started=time.time())
            )
            where = f' (written to {self.run_file}; try: ding ctl status --exp-dir ./{self.exp_name})'
        print(
            f'[ding] run service of {self.instance} at {server.url} token={token}{where}', file=sys.stderr, flush=True
        )
        self.emit('service_started', address=server.address, pid=os.getpid())

    # ---- the training loop's side --------------------------------------------------------------------
    def gate(self, iteration: int, envstep: int | None = None) -> bool:
        """Top of the pipeline loop: False when the run was terminated (the final checkpoint is written)."""
        if envstep is not None and self.metrics is not None:
            self.metrics.set_env_steps(envstep)
            self.metrics.beat()
        return self.control.gate(iteration)

    def observe_sample(self, batch: Any, seconds: float, train_iter: int) -> None:
        """One batch sampled in ``seconds``; its mean policy lag from the samples' ``collect_iter``."""
        if self.metrics is None:
            return
        lag = None
        if isinstance(batch, list) and batch:
            total, n = 0, 0
            for sample in batch:
                it = sample.get('collect_iter')
                if it is not None:
                    total += int(it)
                    n += 1
            if n:
                lag = train_iter - total / n
        self.metrics.observe_sample(seconds, lag)

    def end_run(self, solved: bool, reason: str) -> None:
        """The pipeline is ending (solved, limits, terminate, error)."""
        if self._ended:
            return
        self._ended = True
        if self.control.state != TERMINATED:
            self.control.mark_finished(reason)
        self.emit('run_end', solved=bool(solved), reason=reason, iteration=self.control.iteration)

    def close(self) -> None:
        """Stop the server, remove ``run.json``, close the JSON log. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._ended:
            self.end_run(False, 'closed')
        try:
            if self.server is not None:
                self.server.close()
        finally:
            if self.run_file is not None:
                try:
                    if read_run_file(self.run_file).get('run_id') == self.run_id:
                        os.remove(self.run_file)
                except (OSError, ValueError):
                    pass
            if self.metrics is not None:
                self.metrics.deactivate()
            if self.events is not None:
                self.events.close()


def start_service(
    service_cfg: Mapping[str, Any] | None,
    exp_name: str,
    instance: str = 'learner',
    serve_weights: bool = True,
    run_file: str | None = RUN_FILE,
    config_hash: str = '',
    log: Callable[[str], None] | None = None,
) -> ServiceRuntime:
    """A ``ServiceRuntime`` with its server started (when ``service_cfg.enable``): the one call another
    process (e.g. the parallel coordinator) needs to serve ``/run/*``, ``/metrics`` and ``/healthz``.
    Drive it with ``runtime.control.poll()`` between rounds of work; ``runtime.close()`` at the end."""
    runtime = ServiceRuntime(service_cfg, exp_name, instance, config_hash, log=log, serve_weights=serve_weights)
    try:
        runtime.start_server(run_file)
    except BaseException:
        runtime.close()
        raise
    return runtime


def service_enabled(cfg: Mapping[str, Any]) -> bool:
    """Whether ``cfg.service`` asks for anything (the HTTP server or the JSON log)."""
    section = cfg.get('service') if isinstance(cfg, Mapping) else None
    return isinstance(section, Mapping) and bool(section.get('enable') or section.get('json_log'))


def attach_serial_service(parts: Any) -> ServiceRuntime | None:
    """Give a serial pipeline (``ding.entry.pipeline_parts.SerialParts``) its service per ``cfg.service``.

    Registers the hooks, the tunable keys the pipeline and policy support, the final-checkpoint action of
    terminate, starts the server, and adds the runtime's ``close`` to ``parts.closables``. Returns the
    runtime (None when the config asks for nothing).
    """
    cfg = parts.cfg
    if not service_enabled(cfg):
        check_service_config(cfg.get('service'))  # still report typos in a disabled section
        return None
    learner, policy = parts.learner, parts.policy
    runtime = ServiceRuntime(cfg.service, cfg.exp_name, learner.instance_name, learner.config_hash, log=learner.info)
    try:
        runtime.attach_learner(learner, learn_cfg=cfg.policy.learn)
        _register_serial_tunables(runtime.control, cfg, policy, with_buffer=parts.buffer is not None)
        runtime.control.on_terminate = lambda: runtime.terminate_with_checkpoint(learner)
        if runtime.metrics is not None:
            runtime.metrics.track_hyperparameters(runtime.control.getters())
        runtime.start_server()
        runtime.emit('run_start', exp_name=cfg.exp_name, pid=os.getpid(), tunable=runtime.control.tunable_keys)
    except BaseException:
        runtime.close()
        raise
    return runtime


def _has_attribute(learn_mode: Any, name: str) -> bool:
    try:
        learn_mode.get_attribute(name)
        return True
    except AttributeError:
        return False


def register_loss_weights(control: RunControl, learn_mode: Any, learn_cfg: Any = None) -> list[str]:
    """Make ``entropy_weight`` / ``value_weight`` tunable where the policy keeps them (``policy._entropy_weight``):
    set on the policy (read by its next ``forward``) and in ``learn_cfg``. Returns the keys registered."""
    keys = []
    for key in ('entropy_weight', 'value_weight'):
        if _has_attribute(learn_mode, key):

            def get(key: str = key) -> float:
                return float(learn_mode.get_attribute(key))

            def set_(value: float, key: str = key) -> None:
                learn_mode.set_attribute(key, float(value))
                if learn_cfg is not None:
                    learn_cfg[key] = float(value)

            control.register_tunable(key, get, set_)
            keys.append(key)
    return keys


def register_batch_size_attribute(
    control: RunControl,
    learn_mode: Any,
    learn_cfg: Any = None,
    check: Callable[[Any, Mapping[str, Any]], str | None] | None = None,
) -> None:
    """Make ``batch_size`` tunable as the policy's attribute (on-policy minibatch size; in parallel mode the
    comm learner's data demand reads it for every batch it asks for)."""

    def set_batch(value: int) -> None:
        learn_mode.set_attribute('batch_size', int(value))
        if learn_cfg is not None:
            learn_cfg['batch_size'] = int(value)

    control.register_tunable('batch_size', lambda: int(learn_mode.get_attribute('batch_size')), set_batch, check)


def _register_serial_tunables(control: RunControl, cfg: Any, policy: Any, with_buffer: bool) -> None:
    """The keys a serial pipeline can change between iterations, for this policy."""
    learn_cfg = cfg.policy.learn
    learn_mode = policy.learn_mode
    register_loss_weights(control, learn_mode, learn_cfg)

    if with_buffer:
        # The off-policy loop reads both from the config at the top of every collect.
        buffer_size = cfg.policy.other.replay_buffer.get('replay_buffer_size')

        def check_batch(value: int, pending: Mapping[str, Any]) -> str | None:
            if isinstance(buffer_size, int) and value > buffer_size:
                return (
                    f'batch_size = {value} must not exceed policy.other.replay_buffer.replay_buffer_size = '
                    f'{buffer_size}'
                )
            return None

        control.register_tunable(
            'update_per_collect',
            lambda: int(learn_cfg.update_per_collect),
            lambda v: learn_cfg.__setitem__('update_per_collect', int(v)),
        )
        control.register_tunable(
            'batch_size',
            lambda: int(learn_cfg.batch_size),
            lambda v: learn_cfg.__setitem__('batch_size', int(v)),
            check_batch,
        )
    elif _has_attribute(learn_mode, 'batch_size'):
        n_sample = cfg.policy.collect.get('n_sample')

        def check_minibatch(value: int, pending: Mapping[str, Any]) -> str | None:
            if isinstance(n_sample, int) and value > n_sample:
                return f'batch_size = {value} must not exceed policy.collect.n_sample = {n_sample} (on-policy)'
            return None

        register_batch_size_attribute(control, learn_mode, learn_cfg, check_minibatch)

    eps_cfg = cfg.policy.get('other', {}).get('eps')
    if eps_cfg is not None and hasattr(policy, 'epsilon_greedy'):
        from ding.rl_utils import get_epsilon_greedy_fn

        def check_eps(value: Any, pending: Mapping[str, Any]) -> str | None:
            start = pending.get('eps.start', eps_cfg.start)
            end = pending.get('eps.end', eps_cfg.end)
            if end > start:
                return f'eps.end = {end} must not exceed eps.start = {start}'
            return None

        def setter(field: str) -> Callable[[Any], None]:
            def set_(value: Any) -> None:
                eps_cfg[field] = value
                fn = get_epsilon_greedy_fn(eps_cfg.start, eps_cfg.end, eps_cfg.decay, eps_cfg.type)
                policy.epsilon_greedy = fn  # the commander's schedule: the serial collector gets eps from it

            return set_

        for field in ('start', 'end', 'decay'):
            control.register_tunable(
                f'eps.{field}',
                lambda f=field: eps_cfg[f],
                setter(field),
                check_eps if field in ('start', 'end') else None,
            )


__all__ = [
    'MetricsHook',
    'PublishWeightsHook',
    'RunControlHook',
    'TimedCheckpointHook',
    'ServiceRuntime',
    'attach_serial_service',
    'register_loss_weights',
    'register_batch_size_attribute',
    'start_service',
    'service_enabled',
    'time_checkpoint_hooks',
    'write_run_file',
    'read_run_file',
    'run_file_path',
    'new_run_id',
    'RUN_FILE',
]
