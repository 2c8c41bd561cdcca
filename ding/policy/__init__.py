"""Policies: the ``Policy`` base, the factory, and the registered algorithms (dqn, c51, qrdqn, r2d2, ppo, a2c, sac, td3, impala,
appo, es + *_command)."""

from .a2c import A2CPolicy
from .appo import APPOPolicy
from .base_policy import CommandModePolicy, Policy
from .c51 import C51Policy
from .command_mode_policy_instance import (
    A2CCommandModePolicy,
    C51CommandModePolicy,
    DQNCommandModePolicy,
    DummyCommandModePolicy,
    EpsCommandModePolicy,
    PPOCommandModePolicy,
    QRDQNCommandModePolicy,
    R2D2CommandModePolicy,
    SACCommandModePolicy,
    TD3CommandModePolicy,
)
from .dqn import DQNPolicy
from .es import ESPartial, ESPolicy
from .impala import IMPALAPolicy
from .policy_factory import PolicyFactory, create_policy, get_policy_cls
from .ppo import PPOPolicy
from .qrdqn import QRDQNPolicy
from .r2d2 import R2D2Policy
from .sac import SACPolicy
from .td3 import TD3Policy

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
    'C51Policy',
    'QRDQNPolicy',
    'R2D2Policy',
    'SACPolicy',
    'TD3Policy',
    'EpsCommandModePolicy',
    'DummyCommandModePolicy',
    'DQNCommandModePolicy',
    'PPOCommandModePolicy',
    'A2CCommandModePolicy',
    'C51CommandModePolicy',
    'QRDQNCommandModePolicy',
    'R2D2CommandModePolicy',
    'SACCommandModePolicy',
    'TD3CommandModePolicy',
]
