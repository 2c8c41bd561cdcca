"""``BaseCommCollector``: the part of a parallel-mode collector process that talks to the coordinator.

A comm collector does no collection itself. For each collector start task it builds a parallel collector
(``_create_collector``: ``create_parallel_collector`` over the task's configs), binds its own transport
methods to it (``send_stepdata`` writes samples, ``send_metadata`` hands their metadata to the
coordinator, ``get_policy_update_info`` reads newer weights) and runs it.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any

from easydict import EasyDict

from ding.utils.registry import COMM_COLLECTOR_REGISTRY, import_module

from ..base_parallel_collector import BaseParallelCollector
from ..kept_resources import KeptResources
from ..parallel_collector_factory import get_parallel_collector_cls

# Comm collector methods a parallel collector calls.
TRANSPORT_METHODS = ('send_metadata', 'send_stepdata', 'get_policy_update_info')


class BaseCommCollector(ABC):
    """Abstract comm collector: subclasses implement the transport (see ``FlaskFileSystemCollector``)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self._cfg: EasyDict = cfg if isinstance(cfg, EasyDict) else EasyDict(cfg)
        self._end_flag = True
        # the envs (policy, serial collector) of the last collect task, for the next one (see KeptResources)
        self.kept_resources = KeptResources()

    @abstractmethod
    def get_policy_update_info(self, path: str) -> dict[str, Any] | None:
        """``{'model': state_dict, 'iter': policy_iter}`` when ``path`` holds weights not read yet, else None;
        raises ``FileNotFoundError`` (missing) or ``CheckpointError`` (bad file), naming the path."""
        raise NotImplementedError

    @abstractmethod
    def send_metadata(self, metadata: list[dict[str, Any]]) -> None:
        """Hand the metadata of one chunk of samples (one dict per sample) to the coordinator."""
        raise NotImplementedError

    @abstractmethod
    def send_stepdata(self, stepdata: list[dict[str, Any]]) -> list[str]:
        """Store one chunk of training samples where the learner can read them; return one data_id each."""
        raise NotImplementedError

    def start(self) -> None:
        """Start serving the coordinator."""
        self._end_flag = False

    def close(self) -> None:
        """Stop the running task and serving; close the envs kept for a next task."""
        self._end_flag = True
        self.kept_resources.close()

    def _task_config(self, task_info: dict[str, Any]) -> EasyDict:
        """The config of the task's parallel collector: ``collector_cfg`` plus the task's other fields."""
        collector_cfg = task_info.get('collector_cfg')
        if not isinstance(collector_cfg, dict) or not collector_cfg.get('type'):
            raise KeyError(
                "collector task: task_info['collector_cfg'] must be the collector config with a 'type' "
                f"(e.g. 'zergling'), got {collector_cfg!r}"
            )
        for key in ('env', 'policy'):
            if not isinstance(task_info.get(key), dict):
                raise KeyError(
                    f"collector task: task_info['{key}'] must be the {key} config (a dict), got {task_info.get(key)!r}"
                )
        cfg = EasyDict(copy.deepcopy(dict(collector_cfg)))
        cfg.env = copy.deepcopy(task_info['env'])
        cfg.policy = copy.deepcopy(task_info['policy'])
        cfg.eval_flag = bool(task_info.get('eval_flag', False))
        cfg.policy_kwargs = dict(task_info.get('policy_kwargs') or task_info.get('collect_setting') or {})
        cfg.task_id = task_info['task_id']
        cfg.exp_name = task_info.get('exp_name') or self._cfg.get('exp_name', 'default_experiment')
        cfg.instance_name = task_info.get('instance_name') or self._cfg.get('name', 'collector0')
        # weights_address: the learner's run service, given by the coordinator (policy_transport='http')
        for key in ('path_policy', 'path_data', 'seed', 'weights_address'):
            if task_info.get(key) is not None:
                cfg[key] = task_info[key]
        return cfg

    def _create_collector(self, task_info: dict[str, Any], **kwargs: Any) -> Any:
        """Build the parallel collector of a collector start task and bind this comm collector's transport.

        ``task_info`` keys: ``task_id``, ``collector_cfg`` (``policy.collect.collector``, with its ``type``),
        ``env``, ``policy``, ``eval_flag``, ``policy_kwargs`` and optionally ``exp_name``, ``instance_name``,
        ``path_policy`` (policy file), ``path_data``, ``seed``. ``kwargs`` go to the collector (``logger``); a
        collector class with ``uses_kept_resources`` also gets ``kept``, this comm collector's ``KeptResources``.
        """
        cfg = self._task_config(task_info)
        collector_cls = get_parallel_collector_cls(cfg)
        if getattr(collector_cls, 'uses_kept_resources', False):
            kwargs.setdefault('kept', self.kept_resources)
        collector = collector_cls(cfg, **kwargs)
        if isinstance(collector, BaseParallelCollector):
            # The run secret stays out of the task config (configs get logged); weights over HTTP are then
            # signature-checked with a key derived from it.
            collector.use_run_secret(self._cfg.get('secret'))
        for name in TRANSPORT_METHODS:
            setattr(collector, name, getattr(self, name))
        return collector


def create_comm_collector(cfg: dict[str, Any]) -> BaseCommCollector:
    """Build the comm collector registered as ``cfg.type`` (default ``'flask_fs'``), importing ``cfg.import_names``.

    ``cfg`` is the worker's entry of the parallel system config (``system.collector.<name>``, completed by
    the parallel worker with ``name``, ``path_data``, ``path_policy``, ``exp_name`` and ``seed``).
    """
    cfg = cfg if isinstance(cfg, EasyDict) else EasyDict(cfg)
    import_module(cfg.get('import_names', []) or [])
    type_name = cfg.get('type', 'flask_fs')
    if type_name not in COMM_COLLECTOR_REGISTRY:
        import_module(['ding.worker.collector.comm.flask_fs_collector'])
    return COMM_COLLECTOR_REGISTRY.build(type_name, cfg=cfg)


__all__ = ['BaseCommCollector', 'create_comm_collector', 'TRANSPORT_METHODS']
