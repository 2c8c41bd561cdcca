"""Parallel commanders decide which learner and collector tasks the coordinator runs, and when to stop.

A commander is pure decision logic: it never talks to the network. The coordinator asks it for
tasks (``get_learner_task`` / ``get_collector_task``, None when there is nothing to start), reports
back how they ended (``finish_*`` / ``notify_fail_*``) and forwards learner infos. Built-in
commanders: ``solo`` (train until the eval return reaches ``env.stop_value``) and ``naive`` (a
fixed number of tasks). The serial commander ('base') lives in ``base_serial_commander.py``.
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, cast

from easydict import EasyDict

from ding.config.parallel import BUILTIN_COMMANDER_MODULES
from ding.rl_utils.exploration import EpsCommandMode
from ding.utils.registry import COMMANDER_REGISTRY, POLICY_REGISTRY, import_module

_uid_counter = itertools.count()


def get_task_uid() -> str:
    """An id unique across processes and restarts of this one: time, pid and a counter."""
    return f'{time.strftime("%Y%m%d%H%M%S")}_{os.getpid()}_{next(_uid_counter)}'


class TaskSpace:
    """At most ``max_val`` tasks of one kind at a time (DI-engine's ``LimitedSpaceContainer``)."""

    def __init__(self, min_val: int = 0, max_val: int = 1) -> None:
        if max_val < min_val or min_val < 0:
            raise ValueError(f'task space: need 0 <= min_val <= max_val, got min={min_val}, max={max_val}')
        self.min_val = min_val
        self.max_val = max_val
        self.cur = min_val
        self._lock = threading.Lock()

    def acquire_space(self) -> bool:
        with self._lock:
            if self.cur < self.max_val:
                self.cur += 1
                return True
            return False

    def release_space(self) -> None:
        with self._lock:
            self.cur = max(self.min_val, self.cur - 1)

    def increase_space(self) -> None:
        with self._lock:
            self.max_val += 1

    def decrease_space(self) -> None:
        # Not clamped: every decrease (a collector lost) is matched by an increase (it came back).
        with self._lock:
            self.max_val -= 1

    def get_residual_space(self) -> int:
        with self._lock:
            return self.max_val - self.cur


class BaseCommander(ABC):
    """The interface the coordinator drives; see the module docstring."""

    config: dict[str, Any] = dict(
        collector_task_space=1,
        learner_task_space=1,
        eval_interval=60.0,
    )
    # set by the concrete commanders' constructors
    _collector_task_space: TaskSpace
    _policy: Any = None  # the command mode of the run's policy

    def __init__(self, cfg: EasyDict) -> None:
        """``cfg``: the compiled main config (``cfg.policy.other.commander`` holds the commander's settings)."""
        self._cfg = cfg

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    @abstractmethod
    def get_collector_task(self) -> dict | None:
        """A new collector task, or None when none should start now."""

    @abstractmethod
    def get_learner_task(self) -> dict | None:
        """A new learner task, or None when none should start now."""

    @abstractmethod
    def finish_collector_task(self, task_id: str, finished_task: dict) -> bool:
        """Record a collector task's finish info; True means the whole run should end."""

    @abstractmethod
    def finish_learner_task(self, task_id: str, finished_task: dict) -> str | None:
        """Record a learner task's end; return the buffer_id the coordinator may close (or None)."""

    @abstractmethod
    def notify_fail_collector_task(self, task: dict) -> None:
        """A collector task failed for good (not reassigned): free its slot."""

    @abstractmethod
    def notify_fail_learner_task(self, task: dict) -> None:
        """A learner task failed for good (not reassigned): free its slot."""

    @abstractmethod
    def update_learner_info(self, task_id: str, info: dict) -> None:
        """The learn info of one training iteration of ``task_id``."""

    def judge_collector_finish(self, task_id: str, info: dict) -> bool:
        """True when a collector's answer says its task is over."""
        return bool(info.get('collector_done', False))

    def judge_learner_finish(self, task_id: str, info: dict) -> bool:
        """True when a learner's learn info says its task is over (e.g. ``max_iterations`` reached)."""
        return bool(info.get('learner_done', False))

    def increase_collector_task_space(self) -> None:
        """A collector joined the run: one more collector task may run at a time."""
        self._collector_task_space.increase_space()

    def decrease_collector_task_space(self) -> None:
        """A collector left the run: one collector task fewer at a time."""
        self._collector_task_space.decrease_space()

    def close(self) -> None:
        """Release loggers; the default has none."""

    @property
    def command_mode(self) -> Any:
        """The policy's command mode the collect settings come from (e.g. an epsilon schedule), or None."""
        return self._policy

    @property
    def end_flag(self) -> bool:
        """True once the commander has ended the run (it gives out no more tasks)."""
        return getattr(self, '_end_flag', False)

    @property
    def solved(self) -> bool:
        """True when the run ended because the goal (e.g. the stop value) was reached."""
        return getattr(self, '_solved', False)

    @property
    def end_reason(self) -> str:
        return getattr(self, '_end_reason', '')


class NoCommandMode:
    """The command mode of on-policy algorithms: no settings."""

    def get_setting_collect(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}

    def get_setting_learn(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}

    def get_setting_eval(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}


def _eps_command_mode(policy_cfg: EasyDict) -> Any:
    if 'eps' not in policy_cfg.get('other', {}):
        raise KeyError(f"policy type '{policy_cfg.type}': the compiled config has no policy.other.eps")
    return EpsCommandMode(policy_cfg.other.eps, owner=f'{policy_cfg.type} command mode')


# The built-in ``*_command`` policies of ``ding.policy`` (command_mode_policy_instance.py) and their command
# modes, built here without the policy classes: those import torch, which the coordinator process does not
# need. tests/parallel/test_coordinator_torch_free.py checks that each gives its policy's settings.
BUILTIN_COMMAND_MODES: dict[str, Callable[[EasyDict], Any]] = {
    'dqn_command': _eps_command_mode,
    'ppo_command': lambda policy_cfg: NoCommandMode(),
    'a2c_command': lambda policy_cfg: NoCommandMode(),
}


def command_policy(cfg: EasyDict) -> Any:
    """The command mode of ``cfg.policy`` (``get_setting_collect / learn / eval``). A built-in ``*_command``
    type gets its torch-free command mode (:data:`BUILTIN_COMMAND_MODES`); any other policy (e.g. one from
    ``import_names``) is built with ``enable_field=['command']`` (no model, no optimizer)."""
    policy_cfg = copy.deepcopy(cfg.policy)
    if policy_cfg.type in BUILTIN_COMMAND_MODES and not policy_cfg.get('import_names'):
        return BUILTIN_COMMAND_MODES[policy_cfg.type](policy_cfg)
    import_module(policy_cfg.get('import_names', []) or [])
    if policy_cfg.type not in POLICY_REGISTRY:
        import_module(['ding.policy'])
    policy = POLICY_REGISTRY.build(policy_cfg.type, policy_cfg, enable_field=['command'])
    return policy.command_mode


def command_info(learner_step: int, envstep: int) -> dict[str, int]:
    """What ``get_setting_collect`` reads, under each name DI-engine policies have used for it."""
    return {
        'learner_step': learner_step,
        'learner_train_iter': learner_step,
        'train_iter': learner_step,
        'envstep': envstep,
        'collector_envstep': envstep,
        'step': envstep,
    }


def make_learner_task(cfg: EasyDict, task_id: str, buffer_id: str, policy_name: str) -> dict[str, Any]:
    """A learner task as the coordinator sends it (it adds the worker's paths and name on assignment)."""
    learner_cfg = copy.deepcopy(cfg.policy.learn.learner)
    return {
        'task_id': task_id,
        'buffer_id': buffer_id,
        'policy_name': policy_name,
        'exp_name': cfg.exp_name,
        'policy': copy.deepcopy(cfg.policy),
        'learner_cfg': learner_cfg,
        'replay_buffer_cfg': copy.deepcopy(cfg.policy.other.replay_buffer),
        'max_iterations': int(learner_cfg.get('train_iterations', int(1e10))),
    }


def make_collector_task(
    cfg: EasyDict,
    task_id: str,
    buffer_id: str,
    policy_name: str,
    learner_task_id: str,
    eval_flag: bool,
    policy_kwargs: dict[str, Any],
) -> dict[str, Any]:
    """A collector (or, with ``eval_flag``, evaluation) task."""
    return {
        'task_id': task_id,
        'buffer_id': buffer_id,
        'learner_task_id': learner_task_id,
        'policy_name': policy_name,
        'exp_name': cfg.exp_name,
        'eval_flag': eval_flag,
        'policy_kwargs': dict(policy_kwargs),
        'collector_cfg': copy.deepcopy(cfg.policy.collect.collector),
        'env': copy.deepcopy(cfg.env),
        'policy': copy.deepcopy(cfg.policy),
    }


def get_parallel_commander_cls(cfg: dict[str, Any]) -> type[BaseCommander]:
    """The commander class named by ``cfg.type`` (``cfg`` is ``policy.other.commander`` or a create-config entry)."""
    import_module(cfg.get('import_names', []) or [])
    type_name = cfg.get('type')
    if type_name is None:
        raise KeyError(f"commander config needs a 'type' (one of {COMMANDER_REGISTRY.query()}), got keys {list(cfg)}")
    if type_name not in COMMANDER_REGISTRY:
        import_module(BUILTIN_COMMANDER_MODULES)
    return cast(type[BaseCommander], COMMANDER_REGISTRY.get_cls(type_name))


def create_parallel_commander(cfg: dict[str, Any]) -> BaseCommander:
    """Build the commander named by ``cfg.policy.other.commander.type``; ``cfg`` is the compiled main config."""
    main_cfg = EasyDict(cfg)
    try:
        commander_cfg = main_cfg.policy.other.commander
    except AttributeError:
        raise KeyError("create_parallel_commander: the main config has no 'policy.other.commander' entry") from None
    return get_parallel_commander_cls(commander_cfg)(cfg)
