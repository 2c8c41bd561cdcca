"""The learner: ``BaseLearner`` and its hooks."""

from .base_learner import BaseLearner, create_learner
from .learner_hook import (
    Hook,
    LearnerHook,
    LoadCkptHook,
    LogReduceHook,
    LogShowHook,
    SaveCkptHook,
    add_learner_hook,
    build_learner_hook_by_cfg,
    merge_hooks,
    register_learner_hook,
    show_hooks,
)
from .learner_monitor import LearnerMonitor
from .nan_guard import NanGuard, NanGuardError, NanGuardHook, install_nan_guard

__all__ = [
    'Hook',
    'LearnerHook',
    'LoadCkptHook',
    'SaveCkptHook',
    'LogShowHook',
    'LogReduceHook',
    'register_learner_hook',
    'build_learner_hook_by_cfg',
    'add_learner_hook',
    'merge_hooks',
    'show_hooks',
    'BaseLearner',
    'LearnerMonitor',
    'create_learner',
    'NanGuard',
    'NanGuardError',
    'NanGuardHook',
    'install_nan_guard',
]
