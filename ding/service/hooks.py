"""The run service of a training run: the serial pipeline's wiring, and the names other code imports.

``ServiceRuntime`` (``ding.service.runtime``) bundles one run's ``RunControl``, ``ServiceMetrics``,
``WeightsStore``, ``JsonEventLog`` and ``ServiceServer``; the learner hooks that feed it are in
``ding.service.learner_hooks``, the tunable settings in ``ding.service.tunables``, ``run.json`` in
``ding.service.run_file``. ``attach_serial_service(parts)`` sets a runtime up for a serial pipeline from
``cfg.service``. Every name below stays importable from ``ding.service.hooks``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from . import check_service_config, service_section_enabled
from .learner_hooks import MetricsHook, PublishWeightsHook, RunControlHook, TimedCheckpointHook, time_checkpoint_hooks
from .run_file import RUN_FILE, new_run_id, read_run_file, run_file_path, write_run_file
from .runtime import ServiceRuntime, start_service
from .tunables import register_batch_size_attribute, register_loss_weights, register_serial_tunables


def service_enabled(cfg: Mapping[str, Any]) -> bool:
    """Whether ``cfg.service`` asks for anything (the HTTP server, the JSON log or traces)."""
    return service_section_enabled(cfg.get('service') if isinstance(cfg, Mapping) else None)


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
        if learner.world_size == 1:  # rank 0 alone runs the service: a tune there would split the ranks
            register_serial_tunables(runtime, cfg, policy, with_buffer=parts.buffer is not None)
        runtime.control.on_terminate = lambda: runtime.terminate_with_checkpoint(learner)
        runtime.start_server()
        runtime.emit('run_start', exp_name=cfg.exp_name, pid=os.getpid(), tunable=runtime.control.tunable_keys)
    except BaseException:
        runtime.close()
        raise
    return runtime


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
