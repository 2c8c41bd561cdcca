"""The serial commander: turns learner/collector progress into per-collect policy settings (e.g. epsilon)."""

from __future__ import annotations

import copy
from typing import Any

from easydict import EasyDict

from ding.utils.registry import COMMANDER_REGISTRY, import_module


@COMMANDER_REGISTRY.register('base')
class BaseSerialCommander:
    """Asks the policy's command mode for the collect settings at the current training progress.

    ``step()`` builds ``{'learner_step': learner.train_iter, 'envstep': collector.envstep}`` (on top of
    ``learner.learn_info`` when the learner has one) and returns
    ``policy.get_setting_collect(info)``, e.g. ``{'eps': 0.7}`` for DQN; without a command-mode
    policy it returns ``{}``.
    """

    config: dict[str, Any] = {}

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def __init__(
        self,
        cfg: dict | None,
        learner: Any,
        collector: Any,
        evaluator: Any,
        replay_buffer: Any,
        policy: Any | None = None,
    ) -> None:
        self._cfg = EasyDict(cfg or {})
        self._learner = learner
        self._collector = collector
        self._evaluator = evaluator
        self._replay_buffer = replay_buffer
        self._info: dict[str, Any] = {}
        self._policy = self._command_view(policy)

    @staticmethod
    def _command_view(policy: Any | None) -> Any | None:
        """A ``Policy`` is narrowed to its command mode; one without that mode gives None."""
        if policy is None or hasattr(policy, 'get_setting_collect'):
            return policy
        try:
            return policy.command_mode
        except AttributeError:  # command mode not enabled
            return None

    @property
    def policy(self) -> Any | None:
        return self._policy

    @policy.setter
    def policy(self, policy: Any | None) -> None:
        self._policy = self._command_view(policy)

    def step(self) -> dict[str, Any]:
        """The kwargs for the next ``collector.collect(policy_kwargs=...)``."""
        if self._policy is None:
            return {}
        learn_info = getattr(self._learner, 'learn_info', None)
        if isinstance(learn_info, dict):
            self._info.update(learn_info)
        self._info['learner_step'] = self._learner.train_iter
        self._info['envstep'] = self._collector.envstep
        return self._policy.get_setting_collect(self._info)


def create_serial_commander(cfg: dict | None, *args: Any, **kwargs: Any) -> BaseSerialCommander:
    """``create_serial_commander(cfg.policy.other.commander, learner, collector, evaluator, buffer, policy)``;
    ``cfg.type`` defaults to 'base'."""
    cfg = EasyDict(cfg or {})
    import_module(cfg.get('import_names', []))
    return COMMANDER_REGISTRY.build(cfg.get('type', 'base'), cfg, *args, **kwargs)
