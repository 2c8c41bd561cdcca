"""Build an env manager from the ``env.manager`` config section."""

from __future__ import annotations

import copy
from collections.abc import Callable

from ding.utils import ENV_MANAGER_REGISTRY, import_module

from .base_env_manager import BaseEnvManager


def get_env_manager_cls(cfg: dict) -> type[BaseEnvManager]:
    """The manager class registered as ``cfg.type`` ('base' when absent), after importing ``cfg.import_names``."""
    import_module(cfg.get('import_names', []))
    return ENV_MANAGER_REGISTRY.get_cls(cfg.get('type', 'base'))


def create_env_manager(manager_cfg: dict, env_fn: list[Callable]) -> BaseEnvManager:
    """``manager_cfg``: ``{type: 'base' | 'subprocess', ...manager config keys}``; ``env_fn``: one callable per env."""
    manager_cfg = copy.deepcopy(dict(manager_cfg or {}))
    import_module(manager_cfg.pop('import_names', []))
    manager_type = manager_cfg.pop('type', 'base')
    return ENV_MANAGER_REGISTRY.get_cls(manager_type)(env_fn=env_fn, cfg=manager_cfg)
