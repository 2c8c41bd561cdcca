"""Parallel-mode comm learners: the learner process's side of the coordinator protocol (imports flask)."""

from .base_comm_learner import BaseCommLearner, create_comm_learner
from .flask_fs_learner import FlaskFileSystemLearner
from .learner_slave import LearnerSlave
from .utils import LearnInfoGate, SendLearnInfoHook, SendPolicyHook

__all__ = [
    'BaseCommLearner',
    'create_comm_learner',
    'SendPolicyHook',
    'SendLearnInfoHook',
    'LearnInfoGate',
    'FlaskFileSystemLearner',
    'LearnerSlave',
]
