"""Config files and their compilation: ``read_config``, ``compile_config``, validation, saving."""

from .config import compile_config
from .errors import ConfigError
from .loader import read_config
from .merge import deep_merge_dicts, deep_update
from .parallel import compile_config_parallel
from .parallel_system import parallel_transform
from .validate import validate_config
from .writer import save_config, save_config_py

__all__ = [
    'ConfigError',
    'deep_merge_dicts',
    'deep_update',
    'read_config',
    'save_config',
    'save_config_py',
    'validate_config',
    'compile_config',
    'compile_config_parallel',
    'parallel_transform',
]
