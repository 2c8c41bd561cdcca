"""Build the parallel collector named by a task config's ``type`` (``PARALLEL_COLLECTOR_REGISTRY``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.utils.registry import PARALLEL_COLLECTOR_REGISTRY, import_module

# Modules of the built-in parallel collectors, imported on demand so that a config can name them
# without listing import_names.
BUILTIN_PARALLEL_COLLECTOR_MODULES = ('ding.worker.collector.zergling_parallel_collector',)


def get_parallel_collector_cls(cfg: dict[str, Any]) -> Callable[..., Any]:
    """The class registered as ``cfg.type`` (after importing ``cfg.import_names``)."""
    import_module(cfg.get('import_names', []) or [])
    type_name = cfg.get('type')
    if type_name is None:
        raise KeyError(
            f"parallel collector config needs a 'type' (one of {PARALLEL_COLLECTOR_REGISTRY.query()}), "
            f'got keys {sorted(cfg)}'
        )
    if type_name not in PARALLEL_COLLECTOR_REGISTRY:
        import_module(BUILTIN_PARALLEL_COLLECTOR_MODULES)
    return PARALLEL_COLLECTOR_REGISTRY.get_cls(type_name)


def create_parallel_collector(cfg: dict[str, Any], **kwargs: Any) -> Any:
    """``create_parallel_collector(task_cfg, logger=...)``: the parallel collector of ``cfg.type`` for one task.

    ``cfg`` is the collector config (``policy.collect.collector``) plus the start task's ``env``, ``policy``,
    ``eval_flag``, ``policy_kwargs``, ``path_policy``, ``path_data``, ``task_id``, ``exp_name``,
    ``instance_name`` and ``seed`` (``BaseCommCollector._create_collector`` assembles it).
    """
    cfg = cfg if isinstance(cfg, EasyDict) else EasyDict(cfg)
    return get_parallel_collector_cls(cfg)(cfg, **kwargs)


__all__ = ['create_parallel_collector', 'get_parallel_collector_cls', 'BUILTIN_PARALLEL_COLLECTOR_MODULES']
