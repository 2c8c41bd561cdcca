"""Neural networks: encoders, heads and registered model templates (``dqn``, ``vac``, ``impala_vac``,
``continuous_qac``, ``c51dqn``, ``qrdqn``)."""

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
from .template import C51DQN, DQN, DRQN, IMPALAVAC, QRDQN, VAC, ContinuousQAC

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
    'DRQN',
    'VAC',
    'IMPALAVAC',
    'ContinuousQAC',
    'C51DQN',
    'QRDQN',
]
