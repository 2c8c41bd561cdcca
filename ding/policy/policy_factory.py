"""Build policies from config, and a random-action stand-in for warm-up collection."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import torch
from easydict import EasyDict

from ding.utils.registry import POLICY_REGISTRY, import_module

from .base_policy import Policy


def _check_cfg(cfg: Any, fn: str) -> EasyDict:
    if not isinstance(cfg, Mapping):
        raise TypeError(f'{fn}: policy config must be a dict, got {type(cfg).__name__}')
    cfg = cfg if isinstance(cfg, EasyDict) else EasyDict(cfg)
    if 'type' not in cfg:
        raise KeyError(f"{fn}: policy config needs a 'type' key (one of {POLICY_REGISTRY.query()})")
    import_module(cfg.get('import_names', []))
    return cfg


def create_policy(cfg: dict, model: torch.nn.Module | None = None, enable_field: list[str] | None = None) -> Policy:
    """``POLICY_REGISTRY[cfg.type](cfg, model, enable_field)`` after importing ``cfg.import_names``."""
    checked = _check_cfg(cfg, 'create_policy')
    return POLICY_REGISTRY.build(checked.type, checked, model=model, enable_field=enable_field)


def get_policy_cls(cfg: dict) -> type[Policy]:
    """The registered policy class named by ``cfg.type``."""
    checked = _check_cfg(cfg, 'get_policy_cls')
    return cast('type[Policy]', POLICY_REGISTRY.get_cls(checked.type))


class PolicyFactory:
    """Policies that need no model."""

    @staticmethod
    def get_random_policy(policy: Any, action_space: Any = None, forward_fn: Callable | None = None) -> Any:
        """A collect-mode look-alike of ``policy`` (its ``process_transition``, ``get_train_sample``...) whose
        ``forward`` draws random actions: from ``forward_fn(data) -> {env_id: {'action': ...}}`` if given,
        else ``action_space.sample()`` per env (e.g. a gymnasium space)."""
        if forward_fn is None and action_space is None:
            raise ValueError('PolicyFactory.get_random_policy: pass action_space or forward_fn')

        def forward(data: dict[int, Any], **kwargs: Any) -> dict[int, dict[str, Any]]:
            if forward_fn is not None:
                return forward_fn(data)
            return {env_id: {'action': torch.as_tensor(action_space.sample())} for env_id in data}

        members = {
            name: getattr(policy, name)
            for name in (
                'process_transition',
                'get_train_sample',
                'reset',
                'get_attribute',
                'set_attribute',
                'info',
                'state_dict',
                'load_state_dict',
            )
            if hasattr(policy, name)
        }
        members['forward'] = forward
        return _RandomMode(members)


class _RandomMode:
    def __init__(self, members: dict[str, Callable]) -> None:
        self.__dict__.update(members)
