"""``ServiceRuntime``: one training run's service parts (run control, metrics, weights store, JSON event
log, HTTP server) and how a learner or a coordinator attaches to them."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from ding.interaction.base.auth import resolve_run_secret
from ding.utils.console import say
from ding.utils.tls import TlsSettings
from ding.utils.weights_signing import weights_signing_key, weights_stream_token
from ding.worker.learner.learner_hook import iterations_done
from ding.worker.learner.nan_guard import add_nan_guard_listener, remove_nan_guard_listener

from . import check_service_config
from .http import ServiceServer
from .json_log import JsonEventLog, events_path
from .learner_hooks import MetricsHook, PublishWeightsHook, RunControlHook, model_weights, time_checkpoint_hooks
from .metrics import ServiceMetrics
from .run_control import RunControl
from .run_control_state import TERMINATED
from .run_file import RUN_FILE, new_run_id, read_run_file, write_run_file
from .tunables import register_learning_rate
from .tune_bounds import TuneCheck
from .weights import WeightsStore


def prefetch_queue_size(learner: Any) -> int:
    """Batches waiting in the learner's data loader (``learner.dataloader.queue_size``); 0 when it has none,
    as in the serial pipeline, which trains on batches it samples itself."""
    loader = getattr(learner, 'dataloader', None)
    return int(loader.queue_size) if loader is not None else 0


class ServiceRuntime:
    """One run's service parts. ``cfg`` is the ``service`` config section (see ``ding.service``).

    ``enable`` builds metrics, the weights store (unless ``serve_weights=False``, e.g. in a coordinator)
    and the HTTP server; ``json_log`` the JSON event log; the ``RunControl`` always exists (the HTTP
    server is its only remote entry point). ``log``: where human-readable event lines go.

    ``run_secret``: the run secret (None: ``$DING_RUN_SECRET`` when set); the weights are signed with a key
    derived from it, and published unsigned when there is none.

    ``tracing.enable`` builds ``tracer`` (``ding.service.tracing.RunTracer``; ``span_exporter``: an extra
    exporter, e.g. the SDK's in-memory one).
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
        tls: TlsSettings | None = None,
        run_secret: str | None = None,
        span_exporter: Any = None,
    ) -> None:
        self.cfg = check_service_config(cfg)
        self._tls = tls  # system.tls of a parallel run: the server speaks HTTPS only
        self.exp_name = exp_name
        self.instance = instance
        self.config_hash = config_hash
        self.run_id = run_id or new_run_id()
        self._log = log
        self.control = RunControl(stuck_seconds=self.cfg.health_stuck_seconds)
        self.metrics: ServiceMetrics | None = None
        self.weights: WeightsStore | None = None
        self.server: ServiceServer | None = None
        self.events: JsonEventLog | None = None
        self.run_file: str | None = None
        self._closed = False
        self._ended = False
        self._learner: Any = None
        self._extract: Callable[[Any], dict[str, Any]] = model_weights
        self.tracer: Any = None
        self._stream_token: str | None = None
        if self.cfg.tracing.enable:
            from .tracing import RunTracer  # deferred: OpenTelemetry is an optional extra (check_service_config)

            self.tracer = RunTracer(self.cfg.tracing, self.run_id, exp_name, exporter=span_exporter)
        if self.cfg.json_log:
            self.events = JsonEventLog(
                events_path(exp_name), self.run_id, instance, config_hash, iteration_fn=lambda: self.control.iteration
            )
        if self.cfg.enable:
            self.metrics = ServiceMetrics(self.run_id, exp_name, instance, config_hash)
            add_nan_guard_listener(self.metrics.nan_guard_event)  # the learner's guard reports to this run
            self.control.heartbeat_listeners.append(self.metrics.beat)  # keeps beating while paused
            if serve_weights:
                secret = run_secret if run_secret is not None else resolve_run_secret(None)
                self._stream_token = weights_stream_token(secret) if secret else None
                self.weights = WeightsStore(
                    latest_version=lambda: self.control.iteration,
                    run_id=self.run_id,
                    signing_key=weights_signing_key(secret) if secret else None,
                )
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
        extract: Callable[[Any], dict[str, Any]] = model_weights,
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
        checkpoint_observers = []
        if self.metrics is not None:
            checkpoint_observers.append(self.metrics.observe_checkpoint)
            self.metrics.track_prefetch_queue(lambda: prefetch_queue_size(learner))
        if self.tracer is not None:
            checkpoint_observers.append(self.tracer.record_checkpoint)
            for hook in self.tracer.hooks():
                learner.register_hook(hook)
        if checkpoint_observers:
            time_checkpoint_hooks(learner, checkpoint_observers)
        uploader = getattr(learner, 'checkpoint_uploader', None)
        if uploader is not None:
            self.watch_checkpoint_uploads(uploader)
        if control_hook:
            learner.register_hook(RunControlHook(control=self.control, on_terminate=on_terminate))
        if learner.world_size == 1:  # a tune reaches this rank only: on several ranks they would drift apart
            register_learning_rate(self, learner.policy, learn_cfg)

    def watch_checkpoint_uploads(self, uploader: Any) -> None:
        """Report a learner's checkpoint uploader: ``checkpoint`` in status and health (``checkpoint_stalled``
        while uploads keep failing), the upload metrics, and its stalled / recovered events."""

        def report() -> dict[str, Any]:
            state = uploader.state()
            if state['stalled']:
                state['degraded'] = 'checkpoint_stalled'
                state['reason'] = (
                    f'uploads to {state["ckpt_uri"]} failing for {state["stalled_seconds"]:.0f} s ({state["last_error"]})'
                )
            return state

        self.control.reporters['checkpoint'] = report
        if self.metrics is not None:
            self.metrics.track_checkpoint_pending(lambda: uploader.pending)
            uploader.add_listener(self.metrics.checkpoint_upload_event)
        uploader.add_listener(self._on_checkpoint_event)

    def _on_checkpoint_event(self, event: str, fields: dict[str, Any]) -> None:
        if event in ('checkpoint_stalled', 'checkpoint_recovered'):
            self.control.record_event(event, **fields)  # shows in /run/status events; listeners log it
        elif event == 'checkpoint_uploaded':
            self.emit(event, **fields)

    def register_tunable(
        self,
        key: str,
        getter: Callable[[], Any],
        setter: Callable[[Any], None],
        check: TuneCheck | None = None,
    ) -> None:
        """THE way to make ``key`` tunable in a run: ``control.register_tunable`` (the primitive) plus the
        ``learner_hyperparameter{key}`` gauge. ``ding.service.tunables`` registers through here."""
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
        if self.tracer is not None and path is not None:
            self.tracer.record_checkpoint(seconds)
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
        token = self.cfg.token or secrets.token_hex(16)
        info = {
            'run_id': self.run_id,
            'exp_name': self.exp_name,
            'instance': self.instance,
            'pid': os.getpid(),
            'config_hash': self.config_hash,
        }
        server = ServiceServer(
            self.cfg.host,
            self.cfg.port,
            token,
            self.control,
            self.metrics,
            self.weights,
            info,
            tls=self._tls,
            stream_token=self._stream_token,
        )
        server.start()
        self.server = server
        if self.metrics is not None:
            self.metrics.track_weights_subscribers(lambda: server.subscribers)
        # The token itself is never printed: this line lands in log files other users may read.
        if run_file:
            self.run_file = os.path.join('.', self.exp_name, run_file)
            found = dict(info, address=server.address, url=server.url, token=token, started=time.time())
            if self._tls is not None:
                found['ca_file'] = self._tls.ca_file  # what ding ctl trusts
            write_run_file(self.run_file, found)
            where = (
                f'; control token in {self.run_file} (readable by its owner only; '
                f'try: ding ctl status --exp-dir ./{self.exp_name})'
            )
        elif self.cfg.token:
            where = '; control token: service.token of the config'
        else:
            where = '; control token not written anywhere (set service.token to control this run from outside)'
        say(f'[ding] run service of {self.instance} at {server.url}{where}')  # not at the quiet console level
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
        if self.tracer is not None:
            self.tracer.record_sample(seconds, ok=batch is not None)
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
        self.metrics.observe_sample(seconds, lag, status='empty' if batch is None else 'ok')

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
                remove_nan_guard_listener(self.metrics.nan_guard_event)
            if self.tracer is not None:
                self.tracer.close()  # ends open spans and flushes the exporters
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
    tls: TlsSettings | None = None,
) -> ServiceRuntime:
    """A ``ServiceRuntime`` with its server started (when ``service_cfg.enable``): the one call another
    process (e.g. the parallel coordinator) needs to serve ``/run/*``, ``/metrics`` and ``/healthz``.
    Drive it with ``runtime.control.poll()`` between rounds of work; ``runtime.close()`` at the end."""
    runtime = ServiceRuntime(
        service_cfg, exp_name, instance, config_hash, log=log, serve_weights=serve_weights, tls=tls
    )
    try:
        runtime.start_server(run_file)
    except BaseException:
        runtime.close()
        raise
    return runtime


__all__ = ['ServiceRuntime', 'start_service', 'prefetch_queue_size']
