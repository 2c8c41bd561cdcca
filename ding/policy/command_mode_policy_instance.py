"""Command-mode variants (``*_command``) of the policies: they also turn learner / collector counters into
collect settings for the serial commander. The parallel coordinator builds the same command modes
without these classes (see ``ding.worker.coordinator.base_parallel_commander.command_policy``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ding.rl_utils.exploration import EpsCommandMode
from ding.utils.registry import POLICY_REGISTRY

from .a2c import A2CPolicy
from .base_policy import CommandModePolicy
from .c51 import C51Policy
from .dqn import DQNPolicy
from .ppo import PPOPolicy
from .qrdqn import QRDQNPolicy
from .r2d2 import R2D2Policy
from .sac import SACPolicy
from .td3 import TD3Policy


class EpsCommandModePolicy(CommandModePolicy):
    """Collect setting ``{'eps': schedule(envstep)}`` from ``cfg.other.eps = {type, start, end, decay}``
    (the schedule and its settings are :class:`ding.rl_utils.EpsCommandMode`'s)."""

    def _init_command(self) -> None:
        self._eps_command = EpsCommandMode(self._cfg.other.eps, owner=type(self).__name__)

    @property
    def epsilon_greedy(self) -> Callable[[int], float]:
        """The schedule in use (run control may replace it)."""
        return self._eps_command.epsilon_greedy

    @epsilon_greedy.setter
    def epsilon_greedy(self, fn: Callable[[int], float]) -> None:
        self._eps_command.epsilon_greedy = fn

    def _get_setting_collect(self, command_info: dict[str, Any]) -> dict[str, Any]:
        """``command_info``: ``{'learner_step': int, 'envstep': int}``; the schedule runs on ``envstep``."""
        return self._eps_command.get_setting_collect(command_info)

    def _get_setting_learn(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _get_setting_eval(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}


class DummyCommandModePolicy(CommandModePolicy):
    """No settings: on-policy algorithms need nothing from the commander."""

    def _get_setting_collect(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _get_setting_learn(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _get_setting_eval(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}


@POLICY_REGISTRY.register('dqn_command')
class DQNCommandModePolicy(EpsCommandModePolicy, DQNPolicy):
    pass


@POLICY_REGISTRY.register('ppo_command')
class PPOCommandModePolicy(DummyCommandModePolicy, PPOPolicy):
    pass


@POLICY_REGISTRY.register('a2c_command')
class A2CCommandModePolicy(DummyCommandModePolicy, A2CPolicy):
    pass


@POLICY_REGISTRY.register('c51_command')
class C51CommandModePolicy(EpsCommandModePolicy, C51Policy):
    pass


@POLICY_REGISTRY.register('qrdqn_command')
class QRDQNCommandModePolicy(EpsCommandModePolicy, QRDQNPolicy):
    pass


@POLICY_REGISTRY.register('r2d2_command')
class R2D2CommandModePolicy(EpsCommandModePolicy, R2D2Policy):
    pass


@POLICY_REGISTRY.register('sac_command')
class SACCommandModePolicy(DummyCommandModePolicy, SACPolicy):
    pass


@POLICY_REGISTRY.register('td3_command')
class TD3CommandModePolicy(DummyCommandModePolicy, TD3Policy):
    pass
