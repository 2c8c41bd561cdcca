"""The run service of the async pipeline: the serial pipeline's wiring (hooks, tunables, terminate with a
final checkpoint, the server) plus what only this pipeline has: the trajectory queue and the policy lag."""

from __future__ import annotations

from typing import Any

from prometheus_client import Gauge

from .hooks import attach_serial_service
from .runtime import ServiceRuntime


def attach_async_service(parts: Any) -> ServiceRuntime | None:
    """Give an async pipeline (``ding.entry.async_entry.AsyncParts``) its service per ``cfg.service``.

    As ``attach_serial_service``, and with metrics on: ``prefetch_queue_size`` reads the trajectory queue,
    ``policy_lag_min`` / ``policy_lag_max`` (gauges, the newest batch) join the ``policy_lag`` histogram of
    batch means, and ``async_dropped_trajectories`` counts drops (``drop_when_full``).
    """
    runtime = attach_serial_service(parts)
    if runtime is None or runtime.metrics is None:
        return runtime
    feed, pool, metrics = parts.feed, parts.pool, runtime.metrics
    metrics.track_prefetch_queue(lambda: pool.trajectories.qsize())

    def lag(field: str) -> Any:
        return lambda: getattr(feed.last_lag, field) if feed.last_lag is not None else float('nan')

    Gauge(
        'policy_lag_min', 'Smallest policy lag (learner iterations) in the newest batch', registry=metrics.registry
    ).set_function(lag('min'))
    Gauge(
        'policy_lag_max', 'Largest policy lag (learner iterations) in the newest batch', registry=metrics.registry
    ).set_function(lag('max'))
    Gauge(
        'async_dropped_trajectories',
        'Trajectories dropped on a full queue (drop_when_full)',
        registry=metrics.registry,
    ).set_function(lambda: float(pool.trajectories.dropped))
    return runtime


__all__ = ['attach_async_service']
