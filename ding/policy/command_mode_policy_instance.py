"""Command-mode variants (``*_command``) of the policies: they also turn learner / collector counters into
collect settings for the serial commander."""
from __future__ import annotations

from typing import Any, Dict

from ding.rl_utils import get_epsilon_greedy_fn
from ding.utils.registry import POLICY_REGISTRY
from .base_policy import CommandModePolicy
from .a2c import A2CPolicy
from .dqn import DQNPolicy
from .ppo import PPOPolicy


class EpsCommandModePolicy(CommandModePolicy):
    """Collect setting ``{'eps': schedule(envstep)}`` from ``cfg.other.eps = {type, start, end, decay}``."""

    def _init_command(self) -> None:
        eps_cfg = self._cfg.other.eps
        self.epsilon_greedy = get_epsilon_greedy_fn(eps_cfg.start, eps_cfg.end, eps_cfg.decay, eps_cfg.type)

    def _get_setting_collect(self, command_info: Dict[str, Any]) -> Dict[str, Any]:
        """``command_info``: ``{'learner_step': int, 'envstep': int}``; the schedule runs on ``envstep``."""
        if 'envstep' in command_info:
            step = command_info['envstep']
        elif 'step' in command_info:
            step = command_info['step']
        else:
            raise KeyError(f"{type(self).__name__}.get_setting_collect: command_info needs 'envstep', "
                           f"got keys {sorted(command_info)}")
        return {'eps': self.epsilon_greedy(step)}

    def _get_setting_learn(self, command_info: Dict[str, Any]) -> Dict[str, Any]:
        return {}

    def _get_setting_eval(self, command_info: Dict[str, Any]) -> Dict[str, Any]:
        return {}


class DummyCommandModePolicy(CommandModePolicy):
    """No settings: on-policy algorithms need nothing from the commander."""

    def _get_setting_collect(self, command_info: Dict[str, Any]) -> Dict[str, Any]:
        return {}

    def _get_setting_learn(self, command_info: Dict[str, Any]) -> Dict[str, Any]:
        return {}

    def _get_setting_eval(self, command_info: Dict[str, Any]) -> Dict[str, Any]:
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
