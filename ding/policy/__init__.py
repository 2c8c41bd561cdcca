"""Policies: the ``Policy`` base, the factory, and the registered algorithms (dqn, ppo, a2c + *_command)."""
from .base_policy import Policy, CommandModePolicy
from .policy_factory import create_policy, get_policy_cls, PolicyFactory
from .dqn import DQNPolicy
from .ppo import PPOPolicy
from .a2c import A2CPolicy
from .command_mode_policy_instance import (
    EpsCommandModePolicy, DummyCommandModePolicy, DQNCommandModePolicy, PPOCommandModePolicy, A2CCommandModePolicy
)

__all__ = [
    'Policy', 'CommandModePolicy', 'create_policy', 'get_policy_cls', 'PolicyFactory', 'DQNPolicy', 'PPOPolicy',
    'A2CPolicy', 'EpsCommandModePolicy', 'DummyCommandModePolicy', 'DQNCommandModePolicy', 'PPOCommandModePolicy',
    'A2CCommandModePolicy'
]
