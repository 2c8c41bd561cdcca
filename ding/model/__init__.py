"""Neural networks: encoders, heads and registered model templates (``dqn``, ``vac``, ``impala_vac``)."""

from .common import (
    MLP,
    ConvEncoder,
    DiscreteHead,
    DuelingHead,
    FCEncoder,
    RegressionHead,
    ReparameterizationHead,
    create_model,
    fc_block,
)
from .template import DQN, IMPALAVAC, VAC

__all__ = [
    'MLP',
    'fc_block',
    'FCEncoder',
    'ConvEncoder',
    'DiscreteHead',
    'DuelingHead',
    'RegressionHead',
    'ReparameterizationHead',
    'create_model',
    'DQN',
    'VAC',
    'IMPALAVAC',
]
