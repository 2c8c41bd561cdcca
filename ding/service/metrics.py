"""Prometheus metrics of one run, in a registry of its own (never prometheus-client's global one).

``ServiceMetrics`` holds every metric; ``text()`` is what ``GET /metrics`` serves. prometheus-client
is imported when a ``ServiceMetrics`` is built, so importing this module stays cheap (the NaN guard
imports it to report its events).

Other components report through small functions that do nothing when no run has metrics:
``ServiceMetrics.nan_guard_event(kind, n)``, a NaN-guard listener, counts ``nan_guard_events_total{kind}``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)
from prometheus_client.parser import text_string_to_metric_families

# Buckets: sampling from a local buffer takes micro- to milliseconds, from a remote one up to seconds.
SAMPLE_LATENCY_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CHECKPOINT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Policy lag in learner iterations (0: the data came from the current weights).
POLICY_LAG_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)

# The replay service client's states (ding.interaction.replay.client): the learner pauses while 'degraded'.
REPLAY_STATES = ('ok', 'waiting', 'degraded')
RUN_STATES = ('running', 'pausing', 'paused', 'terminating', 'terminated', 'finished')


class ServiceMetrics:
    """The metrics of one run. Cheap to update (a lock and an add per call); read by ``text()``.

    Labels are kept off the per-iteration series; who the run is goes in ``ding_run_info``
    (``run_id``, ``exp_name``, ``worker``, ``config_hash``).
    """

    def __init__(self, run_id: str = '', exp_name: str = '', worker: str = 'learner', config_hash: str = '') -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.run_info = Info('ding_run', 'Identity of this training run', registry=r)
        self.run_info.info({'run_id': run_id, 'exp_name': exp_name, 'worker': worker, 'config_hash': config_hash})

        # learner
        self.sgd_steps = Counter(
            'learner_sgd_steps', 'Learner iterations (optimizer updates) done by this process', registry=r
        )
        self.policy_loss = Gauge('learner_policy_loss', 'Policy loss of the last iteration', registry=r)
        self.value_loss = Gauge(
            'learner_value_loss',
            'Value loss of the last iteration (the TD loss for value-based policies that report only total_loss)',
            registry=r,
        )
        self.entropy = Gauge('learner_entropy', 'Policy entropy of the last iteration', registry=r)
        self.total_loss = Gauge('learner_total_loss', 'Total loss of the last iteration', registry=r)
        self.learning_rate = Gauge('learner_learning_rate', 'Learning rate of the last iteration (cur_lr)', registry=r)
        self.kl = Gauge(
            'learner_kl',
            'Approximate KL divergence between the old and new policy (approx_kl) of the last iteration',
            registry=r,
        )
        self.samples = Counter(
            'learner_samples',
            'Training batches asked for, by outcome (ok: a batch came back; empty: not enough data yet; error: a '
            'Sample call to the replay service failed)',
            ['status'],
            registry=r,
        )
        self.sample_latency = Histogram(
            'learner_sample_latency_seconds',
            'Time to get one training batch',
            buckets=SAMPLE_LATENCY_BUCKETS,
            registry=r,
        )
        self.checkpoint_duration = Histogram(
            'learner_checkpoint_duration_seconds',
            'Time to write one checkpoint',
            buckets=CHECKPOINT_BUCKETS,
            registry=r,
        )
        self.checkpoint_upload_duration = Histogram(
            'learner_checkpoint_upload_duration_seconds',
            'Time to store one checkpoint under ckpt_uri (upload, verification, MANIFEST.json and latest)',
            buckets=CHECKPOINT_BUCKETS,
            registry=r,
        )
        self.checkpoint_upload_bytes = Counter(
            'learner_checkpoint_upload_bytes', 'Bytes of checkpoints stored under ckpt_uri', registry=r
        )
        self.checkpoint_upload_failures = Counter(
            'learner_checkpoint_upload_failures', 'Checkpoint upload attempts that failed', registry=r
        )
        self.checkpoint_stalled = Gauge(
            'learner_checkpoint_stalled',
            '1 while checkpoint uploads keep failing (checkpoint_stalled), else 0',
            registry=r,
        )
        self.checkpoint_pending = Gauge(
            'learner_checkpoint_upload_pending',
            'Checkpoints written locally and not yet stored under ckpt_uri',
            registry=r,
        )
        self.last_step = Gauge(
            'learner_last_step_timestamp_seconds', 'Unix time of the last completed iteration', registry=r
        )
        self.heartbeat = Gauge(
            'learner_heartbeat_timestamp_seconds',
            'Unix time the training loop last showed it is alive (also while paused)',
            registry=r,
        )
        self.iteration = Gauge('learner_iteration', 'Learner iteration counter (train_iter)', registry=r)

        # weights
        self.weights_published = Counter('learner_weights_publish', 'Weights versions published', registry=r)
        self.weights_failures = Counter(
            'learner_weights_publish_failures', 'Weights publications that failed', registry=r
        )
        self.weights_version = Gauge(
            'learner_weights_version', 'Version (learner iteration) of the served weights', registry=r
        )
        self.weights_size = Gauge('learner_weights_size_bytes', 'Size of the served weights payload', registry=r)

        # data
        self.prefetch_queue = Gauge(
            'prefetch_queue_size',
            'Batches waiting in the learner prefetch queue (0 in the serial pipeline, which samples synchronously)',
            registry=r,
        )
        self.replay_state = Enum(
            'learner_replay_state', "State of the replay service's client", states=list(REPLAY_STATES), registry=r
        )
        self.env_steps = Counter('collector_env_steps', 'Environment steps collected', registry=r)
        self.policy_lag = Histogram(
            'policy_lag',
            'Learner iterations between the weights that collected a '
            'batch and the weights it trains (one observation per batch: its mean)',
            buckets=POLICY_LAG_BUCKETS,
            registry=r,
        )
        self.nan_guard = Counter(
            'nan_guard_events', 'NaN guard events (skipped steps, rollbacks)', ['kind'], registry=r
        )

        # run control
        self.control_events = Counter(
            'run_control_events', 'Run-control events (requests, state changes, tunes)', ['event'], registry=r
        )
        self.state = Enum('run_state', 'State of the run', states=list(RUN_STATES), registry=r)
        self.hyperparameter = Gauge(
            'learner_hyperparameter', 'Current value of each tunable hyperparameter', ['key'], registry=r
        )
        # NaN ("no value yet") rather than a misleading 0 until the policy reports the value; a policy that
        # never reports one (DQN has no entropy) keeps NaN.
        self.weights_subscribers = Gauge(
            'learner_weights_stream_subscribers', 'Open GET /weights/stream connections', registry=r
        )
        for gauge in (self.policy_loss, self.value_loss, self.entropy, self.total_loss, self.learning_rate, self.kl):
            gauge.set(float('nan'))
        self._env_steps_seen = 0
        self._env_lock = threading.Lock()

    # ---- updates -------------------------------------------------------------------------------------------
    def observe_iteration(self, iteration: int, scalars: dict[str, Any] | None = None) -> None:
        """One learner iteration completed; ``scalars``: the policy's log values of that iteration."""
        self.sgd_steps.inc()
        now = time.time()
        self.last_step.set(now)
        self.heartbeat.set(now)
        self.iteration.set(iteration)
        if scalars:
            get = scalars.get
            policy_loss, value_loss = get('policy_loss'), get('value_loss')
            if policy_loss is not None:
                self.policy_loss.set(policy_loss)
            if value_loss is not None:
                self.value_loss.set(value_loss)
            total = get('total_loss')
            if total is not None:
                self.total_loss.set(total)
                if policy_loss is None and value_loss is None:
                    self.value_loss.set(total)  # value-based (DQN): the whole loss is the TD loss
            entropy = get('entropy', get('entropy_loss'))
            if entropy is not None:
                self.entropy.set(entropy)
            kl = get('approx_kl')
            if kl is not None:
                self.kl.set(kl)
            lr = get('cur_lr')
            if lr is not None:
                self.learning_rate.set(lr)
            data_time = get('data_time')  # set by BaseLearner.start() (parallel mode)
            if data_time is not None:
                self.samples.labels(status='ok').inc()
                self.sample_latency.observe(data_time)
            lag = get('policy_lag_mean')
            if lag is not None:
                self.policy_lag.observe(lag)

    def beat(self) -> None:
        self.heartbeat.set(time.time())

    def observe_sample(self, seconds: float, lag: float | None = None, status: str = 'ok') -> None:
        self.samples.labels(status=status).inc()
        self.sample_latency.observe(seconds)
        if lag is not None:
            self.policy_lag.observe(lag)

    def observe_replay_call(self, status: str, seconds: float) -> None:
        """One Sample call to the replay service; its latency counts when it returned a batch."""
        self.samples.labels(status=status).inc()
        if status == 'ok':
            self.sample_latency.observe(seconds)

    def observe_policy_lag(self, lag: float) -> None:
        self.policy_lag.observe(lag)

    def observe_checkpoint(self, seconds: float) -> None:
        self.checkpoint_duration.observe(seconds)

    def checkpoint_upload_event(self, event: str, fields: dict[str, Any]) -> None:
        """A checkpoint uploader listener (``ding.utils.checkpoint_uploader``)."""
        if event == 'checkpoint_uploaded':
            self.checkpoint_upload_duration.observe(fields['seconds'])
            self.checkpoint_upload_bytes.inc(fields['stored_bytes'])
        elif event == 'checkpoint_upload_failed':
            self.checkpoint_upload_failures.inc()
        elif event == 'checkpoint_stalled':
            self.checkpoint_stalled.set(1)
        elif event == 'checkpoint_recovered':
            self.checkpoint_stalled.set(0)

    def set_env_steps(self, total: int) -> None:
        """The collector's cumulative env steps; the counter advances by the difference."""
        with self._env_lock:
            delta = int(total) - self._env_steps_seen
            if delta > 0:
                self.env_steps.inc(delta)
                self._env_steps_seen = int(total)

    def track_prefetch_queue(self, fn: Callable[[], float]) -> None:
        """Read the queue size from ``fn`` at every scrape (e.g. ``lambda: loader.qsize()``)."""
        self.prefetch_queue.set_function(_safe(fn))

    def track_checkpoint_pending(self, fn: Callable[[], float]) -> None:
        self.checkpoint_pending.set_function(_safe(fn))

    def weights_published_ok(self, version: int, size: int) -> None:
        self.weights_published.inc()
        self.weights_version.set(version)
        self.weights_size.set(size)

    def weights_publish_failed(self) -> None:
        self.weights_failures.inc()

    def nan_guard_event(self, kind: str = 'skipped_step', n: int = 1) -> None:
        self.nan_guard.labels(kind=kind).inc(n)

    def control_event(self, event: dict[str, Any]) -> None:
        """A ``RunControl`` listener: count the event and follow the state."""
        self.control_events.labels(event=event['event']).inc()
        state = event.get('state')
        if state in RUN_STATES:
            self.state.state(state)

    def track_weights_subscribers(self, fn: Callable[[], float]) -> None:
        self.weights_subscribers.set_function(_safe(fn))

    def track_hyperparameters(self, getters: dict[str, Callable[[], Any]]) -> None:
        """Export ``learner_hyperparameter{key}`` read from each getter at scrape time."""
        for key, getter in getters.items():
            self.hyperparameter.labels(key=key).set_function(_safe(getter))

    # ---- reading -------------------------------------------------------------------------------------------
    def text(self) -> bytes:
        """The Prometheus text exposition of this run's registry."""
        return generate_latest(self.registry)

    @property
    def content_type(self) -> str:
        return CONTENT_TYPE_LATEST


def _safe(fn: Callable[[], Any]) -> Callable[[], float]:
    def read() -> float:
        try:
            return float(fn())
        except Exception:  # a scrape must not fail because one value cannot be read right now
            return float('nan')

    return read


def parse_metrics(text: str) -> dict[str, dict[tuple, float]]:
    """``{sample name: {sorted label items: value}}`` from Prometheus text (for tests and ``ding ctl``)."""
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def sample_value(parsed: dict[str, dict[tuple, float]], name: str, **labels: Any) -> float | None:
    """One value from ``parse_metrics`` output (None when absent)."""
    series = parsed.get(name)
    if series is None:
        return None
    return series.get(tuple(sorted((k, str(v)) for k, v in labels.items())))


__all__ = ['ServiceMetrics', 'parse_metrics', 'sample_value', 'RUN_STATES']
