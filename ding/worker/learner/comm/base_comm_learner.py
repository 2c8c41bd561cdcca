"""``BaseCommLearner``: the part of a parallel-mode learner process that talks to the coordinator.

A comm learner does no training itself. It builds a ``BaseLearner`` for each learner task
(``_create_learner``), connects it to its ``get_data`` data source and its ``send_policy`` /
``send_learn_info`` sinks (``BaseLearner.connect``), registers the hooks (``hooks4call``) that call those,
and tells its observers (``add_learner_observer``: e.g. the run service, attached from above).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any

from easydict import EasyDict

from ding.policy import create_policy
from ding.utils.registry import COMM_LEARNER_REGISTRY, import_module
from ding.worker.resume import RESUME_NEVER, resume_learner

from ..base_learner import create_learner


class LearnerObserver:
    """Told about each learner a comm learner builds, from a layer above the workers (the run service attaches
    through one: ``ding.service.comm_learner``). Every method does nothing here; override what you need."""

    def learner_created(self, learner: Any, task_info: dict[str, Any]) -> None:
        """A learner task's ``BaseLearner`` was built (checkpoint resumed, not started yet)."""

    def tune(self, tune: dict[str, Any]) -> None:
        """The coordinator forwarded a run-control tune with a learn task (it checked it against the config)."""

    @property
    def weights_address(self) -> str | None:
        """Where collectors may fetch the weights over HTTP, answered with the start task (None: nowhere)."""
        return None

    def close(self) -> None:
        """The comm learner closes."""


class BaseCommLearner(ABC):
    """Abstract comm learner: subclasses implement the transport (see ``FlaskFileSystemLearner``).

    Subclasses implement ``send_policy(state_dict)``, ``get_data(batch_size)``,
    ``send_learn_info(learn_info)`` and the ``hooks4call`` property, and usually extend ``start`` / ``close``.
    """

    def __init__(self, cfg: dict[str, Any]) -> None:
        self._cfg: EasyDict = cfg if isinstance(cfg, EasyDict) else EasyDict(cfg)
        self._active_flag = False
        self._observers: list[LearnerObserver] = []

    @property
    def cfg(self) -> EasyDict:
        """The comm learner's config (``system.learner.<name>``, completed with its defaults)."""
        return self._cfg

    @property
    def logger(self) -> Any:
        """The comm learner's log (None where it keeps none, or before it started)."""
        return None

    def add_learner_observer(self, observer: LearnerObserver) -> None:
        """Tell ``observer`` about every learner built from now on (see ``LearnerObserver``)."""
        self._observers.append(observer)

    @property
    def learner_observers(self) -> list[LearnerObserver]:
        return list(self._observers)

    def policy_publish_due(self) -> bool:
        """Whether weights given to ``send_policy`` now would be published; ``SendPolicyHook`` skips the
        state dict otherwise. Always True here; a comm learner that throttles its writes says when."""
        return True

    @abstractmethod
    def send_policy(self, state_dict: dict[str, Any]) -> None:
        """Publish ``{'model': model_state_dict, 'iter': policy_iter}`` for the collectors."""
        raise NotImplementedError

    @abstractmethod
    def get_data(self, batch_size: int) -> list[Any]:
        """The learner data loader's source: one batch of samples (or zero-argument callables)."""
        raise NotImplementedError

    @abstractmethod
    def send_learn_info(self, learn_info: dict[str, Any]) -> None:
        """Report one training iteration's learn info to the coordinator."""
        raise NotImplementedError

    def start(self) -> None:
        """Start serving the coordinator."""
        self._active_flag = True

    def close(self) -> None:
        """Stop serving and release everything ``start`` acquired."""
        self._active_flag = False

    @property
    @abstractmethod
    def hooks4call(self) -> list[Any]:
        """Fresh learner hooks to register on each new learner (send policy, send learn info, ...)."""
        raise NotImplementedError

    def _create_learner(self, task_info: dict[str, Any]) -> Any:
        """Build the policy (learn mode) and a ``BaseLearner`` for a learner start task.

        ``task_info`` keys: ``policy`` (the policy config, required), ``learner_cfg`` (the
        ``policy.learn.learner`` section), ``exp_name``, ``instance_name`` and ``max_iterations``
        (overrides ``learner_cfg.train_iterations``). The learner gets this comm learner's ``get_data``,
        ``send_policy`` and ``send_learn_info`` and every hook of ``hooks4call``.
        """
        policy_cfg = task_info.get('policy')
        if not isinstance(policy_cfg, dict):
            raise KeyError(f"learner task: task_info['policy'] must be the policy config dict, got {policy_cfg!r}")
        learner_cfg = task_info.get('learner_cfg') or {}
        if not isinstance(learner_cfg, dict):
            raise TypeError(f"learner task: task_info['learner_cfg'] must be a dict, got {learner_cfg!r}")
        learner_cfg = EasyDict(copy.deepcopy(dict(learner_cfg)))
        max_iterations = task_info.get('max_iterations')
        if max_iterations is not None:
            if isinstance(max_iterations, bool) or not isinstance(max_iterations, (int, float)) or max_iterations < 0:
                raise ValueError(
                    f"learner task: task_info['max_iterations'] must be an int >= 0, got {max_iterations!r}"
                )
            learner_cfg.train_iterations = int(max_iterations)

        policy = create_policy(EasyDict(copy.deepcopy(dict(policy_cfg))), enable_field=['learn'])
        learn_mode: Any = policy.learn_mode
        try:
            learn_mode.get_attribute('batch_size')
        except AttributeError:
            # The data loader asks the policy for its batch size; a policy that keeps none gets its config's.
            full_cfg = learn_mode.get_attribute('cfg')
            try:
                batch_size = int(full_cfg['learn']['batch_size'])
            except (KeyError, TypeError, ValueError):
                raise KeyError('learner task: the policy config has no learn.batch_size') from None
            learn_mode.set_attribute('batch_size', batch_size)
        learner = create_learner(
            learner_cfg,
            policy=learn_mode,
            exp_name=task_info.get('exp_name') or self._cfg.get('exp_name', 'default_experiment'),
            instance_name=task_info.get('instance_name') or self._cfg.get('name', 'learner0'),
        )
        learner.connect(
            data_source=self.get_data,
            policy_sink=self.send_policy,
            learn_info_sink=self.send_learn_info,
            publish_due=self.policy_publish_due,
        )
        for hook in self.hooks4call:
            learner.register_hook(hook)
        learner.resumed_from = self._resume_from_checkpoint(learner, task_info.get('resume'))
        for observer in self._observers:
            observer.learner_created(learner, task_info)
        return learner

    @staticmethod
    def _resume_from_checkpoint(learner: Any, resume: Any) -> Any:
        """``task_info['resume']``: a checkpoint path (or 'auto') the pipeline resolved for a resumed run, or
        the coordinator's dict for a task moved after a learner died (``checkpoint: 'auto'``, ``not_before``:
        only checkpoints of this run). Loads it with ``resume_learner``; returns the path or None."""
        if isinstance(resume, dict):
            setting, not_before = resume.get('checkpoint'), resume.get('not_before')
        else:
            setting, not_before = resume, None
        if not setting or setting == RESUME_NEVER or not isinstance(setting, str):
            return None
        return resume_learner(learner, setting, not_before=not_before)


def create_comm_learner(cfg: dict[str, Any]) -> BaseCommLearner:
    """Build the comm learner registered as ``cfg.type`` (default ``'flask_fs'``), importing ``cfg.import_names``."""
    cfg = cfg if isinstance(cfg, EasyDict) else EasyDict(cfg)
    import_module(cfg.get('import_names', []))
    return COMM_LEARNER_REGISTRY.build(cfg.get('type', 'flask_fs'), cfg=cfg)


__all__ = ['BaseCommLearner', 'LearnerObserver', 'create_comm_learner']
