from .registry import (
    Registry, import_module, REGISTRIES, LEARNER_REGISTRY, POLICY_REGISTRY, MODEL_REGISTRY, ENV_REGISTRY,
    ENV_MANAGER_REGISTRY, BUFFER_REGISTRY, SERIAL_COLLECTOR_REGISTRY, PARALLEL_COLLECTOR_REGISTRY,
    SERIAL_EVALUATOR_REGISTRY, COMM_LEARNER_REGISTRY, COMM_COLLECTOR_REGISTRY, COMMANDER_REGISTRY,
    LEARNER_HOOK_REGISTRY
)
from .log_helper import build_logger, close_logger, pretty_table
from .time_helper import EasyTimer
from .default_helper import CountVar, LogDict, set_pkg_seed
from .checkpoint import (
    CheckpointError, save_checkpoint, load_checkpoint, read_manifest, verify_checkpoint, list_checkpoints,
    latest_valid_checkpoint, prune_checkpoints, get_rng_state, set_rng_state, config_hash, save_file, read_file
)
from .data_loader import AsyncDataLoader, DataLoaderError
from .collate import default_collate, to_device
