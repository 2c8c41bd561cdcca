"""Helpers shared by every part of ding.

The registries, logging and timing helpers are imported at once (they need only the standard library);
the rest resolve on first use, so a process that never touches tensors (the parallel coordinator) can
use ``ding.utils`` without importing numpy or torch.
"""

from .lazy_import import lazy_exports
from .log_helper import build_logger, close_logger, pretty_table
from .registry import (
    BUFFER_REGISTRY,
    COMM_COLLECTOR_REGISTRY,
    COMM_LEARNER_REGISTRY,
    COMMANDER_REGISTRY,
    ENV_MANAGER_REGISTRY,
    ENV_REGISTRY,
    LEARNER_HOOK_REGISTRY,
    LEARNER_REGISTRY,
    MODEL_REGISTRY,
    PARALLEL_COLLECTOR_REGISTRY,
    POLICY_REGISTRY,
    REGISTRIES,
    SERIAL_COLLECTOR_REGISTRY,
    SERIAL_EVALUATOR_REGISTRY,
    Registry,
    import_module,
)
from .time_helper import EasyTimer

# name -> submodule defining it; imported on first access (numpy / torch behind them)
_LAZY = {
    **dict.fromkeys(('CountVar', 'LogDict', 'set_pkg_seed'), '.default_helper'),
    **dict.fromkeys(
        (
            'CheckpointError',
            'save_checkpoint',
            'load_checkpoint',
            'read_manifest',
            'verify_checkpoint',
            'list_checkpoints',
            'latest_valid_checkpoint',
            'prune_checkpoints',
            'get_rng_state',
            'set_rng_state',
            'config_hash',
            'save_file',
            'read_file',
        ),
        '.checkpoint',
    ),
    **dict.fromkeys(('AsyncDataLoader', 'DataLoaderError'), '.data_loader'),
    **dict.fromkeys(('default_collate', 'to_device'), '.collate'),
}

__all__ = [
    'Registry',
    'import_module',
    'REGISTRIES',
    'LEARNER_REGISTRY',
    'POLICY_REGISTRY',
    'MODEL_REGISTRY',
    'ENV_REGISTRY',
    'ENV_MANAGER_REGISTRY',
    'BUFFER_REGISTRY',
    'SERIAL_COLLECTOR_REGISTRY',
    'PARALLEL_COLLECTOR_REGISTRY',
    'SERIAL_EVALUATOR_REGISTRY',
    'COMM_LEARNER_REGISTRY',
    'COMM_COLLECTOR_REGISTRY',
    'COMMANDER_REGISTRY',
    'LEARNER_HOOK_REGISTRY',
    'build_logger',
    'close_logger',
    'pretty_table',
    'EasyTimer',
    *_LAZY,
]


__getattr__ = lazy_exports(__name__, _LAZY)
