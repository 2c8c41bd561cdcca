"""Policies: the ``Policy`` base, the factory, the registered algorithms (dqn, ppo, a2c, impala, appo, es + *_command)."""

from .a2c import A2CPolicy
from .appo import APPOPolicy
from .base_policy import CommandModePolicy, Policy
from .command_mode_policy_instance import (
    A2CCommandModePolicy,
    DQNCommandModePolicy,
    DummyCommandModePolicy,
    EpsCommandModePolicy,
    PPOCommandModePolicy,
)
from .dqn import DQNPolicy
from .es import ESPartial, ESPolicy
from .impala import IMPALAPolicy
from .policy_factory import PolicyFactory, create_policy, get_policy_cls
from .ppo import PPOPolicy

__all__ = [
    'Policy',
    'CommandModePolicy',
    'create_policy',
    'get_policy_cls',
    'PolicyFactory',
    'DQNPolicy',
    'PPOPolicy',
    'A2CPolicy',
    'IMPALAPolicy',
    'APPOPolicy',
    'ESPolicy',
    'ESPartial',
    'EpsCommandModePolicy',
    'DummyCommandModePolicy',
    'DQNCommandModePolicy',
    'PPOCommandModePolicy',
    'A2CCommandModePolicy',
]
