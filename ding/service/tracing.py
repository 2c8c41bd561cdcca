"""OpenTelemetry traces of a run (the optional ``otel`` extra): spans around sampling, learner iterations
(the optimizer step) and checkpoint saves, attached to a learner through hooks from above.

Configured by ``service.tracing`` (checked by ``ding.service.check_tracing_config``)::

    tracing=dict(
        enable=False,          # build a tracer for this run (needs: pip install 'ding[otel]')
        otlp_endpoint=None,    # 'http://HOST:4318': export over OTLP/HTTP to a collector; None: no exporter
        service_name='ding-learner',
    )

Spans (each run has a provider of its own; the global OpenTelemetry provider is left alone):
``learner.run`` (before_run to after_run) is the parent of ``learner.sample`` (one batch fetched) and
``learner.train_iter`` (one learner iteration); ``learner.checkpoint`` (one checkpoint written) is a child of
the iteration that wrote it, or of the run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ding.worker.learner.learner_hook import LearnerHook, iterations_done

try:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
except ImportError as exc:  # an optional dependency: only runs with service.tracing.enable
    raise ImportError(
        "service.tracing needs OpenTelemetry: pip install 'ding[otel]' "
        '(opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)'
    ) from exc

OTLP_TRACES_PATH = '/v1/traces'


def otlp_traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector endpoint (``/v1/traces`` added unless already there)."""
    endpoint = endpoint.rstrip('/')
    return endpoint if endpoint.endswith(OTLP_TRACES_PATH) else endpoint + OTLP_TRACES_PATH


class RunTracer:
    """The tracer of one run. ``exporter``: an extra span exporter (e.g. the SDK's in-memory one in tests),
    given spans as each ends; the OTLP exporter, when ``otlp_endpoint`` is set, exports in batches."""

    def __init__(
        self, cfg: Mapping[str, Any], run_id: str, exp_name: str, exporter: SpanExporter | None = None
    ) -> None:
        resource = Resource.create(
            {'service.name': cfg['service_name'], 'ding.run_id': run_id, 'ding.exp_name': exp_name}
        )
        self.provider = TracerProvider(resource=resource)
        if exporter is not None:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        if cfg.get('otlp_endpoint'):
            self.provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_traces_url(cfg['otlp_endpoint'])))
            )
        self._tracer = self.provider.get_tracer('ding.service')
        self._run: trace.Span | None = None
        self._iteration: trace.Span | None = None
        self._closed = False

    def start_run(self) -> None:
        if self._run is None:
            self._run = self._tracer.start_span('learner.run')

    def end_run(self, **attributes: Any) -> None:
        self.end_iteration()
        if self._run is not None:
            self._run.set_attributes(attributes)
            self._run.end()
            self._run = None

    def start_iteration(self, iteration: int) -> None:
        self.end_iteration()
        ctx = trace.set_span_in_context(self._run) if self._run is not None else None
        self._iteration = self._tracer.start_span('learner.train_iter', context=ctx)
        self._iteration.set_attribute('ding.iteration', iteration)

    def end_iteration(self, **attributes: Any) -> None:
        if self._iteration is not None:
            self._iteration.set_attributes({k: v for k, v in attributes.items() if v is not None})
            self._iteration.end()
            self._iteration = None

    def record(self, name: str, seconds: float, parent_run_only: bool = False, **attributes: Any) -> None:
        """A span for work of ``seconds`` that just ended (timed by the caller, recorded afterwards, so work
        that turns out to do nothing, e.g. a checkpoint hook that is not due, leaves no span)."""
        end = time.time_ns()
        parent = self._run if parent_run_only else (self._iteration or self._run)
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        span = self._tracer.start_span(name, context=ctx, start_time=end - int(seconds * 1e9), attributes=attributes)
        span.end(end_time=end)

    def record_sample(self, seconds: float, ok: bool) -> None:
        """``learner.sample``: one batch fetched (the run's child: sampling happens between iterations)."""
        self.record('learner.sample', seconds, parent_run_only=True, **{'ding.sample.status': 'ok' if ok else 'empty'})

    def record_checkpoint(self, seconds: float) -> None:
        """``learner.checkpoint``: one checkpoint written, inside the iteration that wrote it (or the run)."""
        self.record('learner.checkpoint', seconds)

    def hooks(self) -> list[TracingHook]:
        """The hooks to register on a learner (``tracing_hooks(self)``)."""
        return tracing_hooks(self)

    def close(self) -> None:
        """End open spans and flush the exporters. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.end_run()
        self.provider.shutdown()


class TracingHook(LearnerHook):
    """Opens and closes the run's spans: ``learner.run`` at before_run / after_run, ``learner.train_iter``
    at before_iter (first) / after_iter (after the checkpoint and weights hooks, before run control)."""

    def __init__(self, name: str, priority: float, position: str, tracer: RunTracer) -> None:
        super().__init__(name, priority, position=position)
        self.tracer = tracer

    def __call__(self, engine: Any) -> None:
        if self.position == 'before_run':
            self.tracer.start_run()
        elif self.position == 'before_iter':
            self.tracer.start_iteration(iterations_done(engine))
        elif self.position == 'after_iter':
            loss = engine.log_buffer['scalar'].get('total_loss')
            self.tracer.end_iteration(**{'ding.total_loss': float(loss) if loss is not None else None})
        else:
            self.tracer.end_run(**{'ding.iterations': iterations_done(engine)})


def tracing_hooks(tracer: RunTracer) -> list[TracingHook]:
    """The hooks to register on a learner for ``tracer``."""
    return [
        TracingHook('trace_run_start', 0, 'before_run', tracer),
        TracingHook('trace_iter_start', 0, 'before_iter', tracer),
        TracingHook('trace_iter_end', 92, 'after_iter', tracer),
        TracingHook('trace_run_end', 100, 'after_run', tracer),
    ]


__all__ = ['RunTracer', 'TracingHook', 'tracing_hooks', 'otlp_traces_url', 'OTLP_TRACES_PATH']
