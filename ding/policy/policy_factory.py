"""Build policies from config, and a random-action stand-in for warm-up collection."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional

import torch
from easydict import EasyDict

from ding.utils.registry import POLICY_REGISTRY, import_module
from .base_policy import Policy


def _check_cfg(cfg: Any, fn: str) -> EasyDict:
    if not isinstance(cfg, Mapping):
        raise TypeError(f"{fn}: policy config must be a dict, got {type(cfg).__name__}")
    cfg = cfg if isinstance(cfg, EasyDict) else EasyDict(cfg)
    if 'type' not in cfg:
        raise KeyError(f"{fn}: policy config needs a 'type' key (one of {POLICY_REGISTRY.query()})")
    import_module(cfg.get('import_names', []))
    return cfg


def create_policy(cfg: Dict, model: Optional[torch.nn.Module] = None,
                  enable_field: Optional[List[str]] = None) -> Policy:
    """``POLICY_REGISTRY[cfg.type](cfg, model, enable_field)`` after importing ``cfg.import_names``."""
    cfg = _check_cfg(cfg, 'create_policy')
    return POLICY_REGISTRY.build(cfg.type, cfg, model=model, enable_field=enable_field)


def get_policy_cls(cfg: Dict) -> type:
    """The registered policy class named by ``cfg.type``."""
    cfg = _check_cfg(cfg, 'get_policy_cls')
    return POLICY_REGISTRY.get_cls(cfg.type)


class PolicyFactory:
    """Policies that need no model."""

    @staticmethod
    def get_random_policy(policy: Any, action_space: Any = None, forward_fn: Optional[Callable] = None) -> Any:
        """A collect-mode look-alike of ``policy`` (its ``process_transition``, ``get_train_sample``...) whose
        ``forward`` draws random actions: from ``forward_fn(data) -> {env_id: {'action': ...}}`` if given,
        else ``action_space.sample()`` per env (e.g. a gymnasium space)."""
        if forward_fn is None and action_space is None:
            raise ValueError("PolicyFactory.get_random_policy: pass action_space or forward_fn")

        def forward(data: Dict[int, Any], **kwargs: Any) -> Dict[int, Dict[str, Any]]:
            if forward_fn is not None:
                return forward_fn(data)
            return {env_id: {'action': torch.as_tensor(action_space.sample())} for env_id in data}

        members = {name: getattr(policy, name) for name in
                   ('process_transition', 'get_train_sample', 'reset', 'get_attribute', 'set_attribute', 'info',
                    'state_dict', 'load_state_dict') if hasattr(policy, name)}
        members['forward'] = forward
        return _RandomMode(members)


class _RandomMode:

    def __init__(self, members: Dict[str, Callable]) -> None:
        self.__dict__.update(members)
