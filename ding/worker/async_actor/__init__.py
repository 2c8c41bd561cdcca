"""The async actor-learner pipeline (Sebulba design): actor threads, a trajectory queue, a staging queue."""

from .actor import ActorThread, EnvGroup, UnrollWriter, run_cycle
from .actor_pool import ActorError, ActorPool
from .config import ASYNC_ACTOR_DEFAULTS, AsyncActorSettings
from .evaluator import VectorEvaluator
from .feed import LagStats, LearnerFeed
from .protocol import TENSOR_KEYS, AsyncActorPolicy, VectorEnv
from .queues import QueueClosed, StagingQueue, TrajectoryQueue
from .trajectory import TrajectoryBuffer, Unroll, join_unrolls

__all__ = [
    'ASYNC_ACTOR_DEFAULTS',
    'ActorError',
    'ActorPool',
    'ActorThread',
    'AsyncActorPolicy',
    'AsyncActorSettings',
    'EnvGroup',
    'LagStats',
    'LearnerFeed',
    'QueueClosed',
    'StagingQueue',
    'TENSOR_KEYS',
    'TrajectoryBuffer',
    'TrajectoryQueue',
    'Unroll',
    'UnrollWriter',
    'VectorEnv',
    'VectorEvaluator',
    'join_unrolls',
    'run_cycle',
]
