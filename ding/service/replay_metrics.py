"""The replay service's client on a run's ``/metrics``: ``learner_samples_total{status}``,
``learner_sample_latency_seconds`` (the Sample calls' latency), ``prefetch_queue_size`` (fed by the
prefetcher) and ``learner_replay_state``; state changes are also run-control events (``ding ctl status``, the
JSON event log, ``run_control_events_total{event="replay_state"}``)."""

from __future__ import annotations

from ding.worker.replay_service.remote_buffer import RemoteReplayBuffer

from .runtime import ServiceRuntime


def watch_replay(runtime: ServiceRuntime, buffer: RemoteReplayBuffer) -> None:
    """Report ``buffer``'s prefetcher through ``runtime``'s metrics and events."""
    prefetcher = buffer.prefetcher
    metrics = runtime.metrics
    if metrics is not None:
        metrics.track_prefetch_queue(prefetcher.qsize)
        metrics.replay_state.state(prefetcher.state)
        prefetcher.observers.append(metrics.observe_replay_call)

    def on_state(before: str, after: str) -> None:
        if metrics is not None:
            metrics.replay_state.state(after)
        runtime.control.record_event(
            'replay_state', before=before, after=after, address=buffer.address, error=prefetcher.last_error or None
        )

    prefetcher.state_listeners.append(on_state)


__all__ = ['watch_replay']
