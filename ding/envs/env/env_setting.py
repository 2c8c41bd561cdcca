"""Turn an ``env`` config section into the env class and the per-env configs of collector / evaluator."""

from __future__ import annotations

from typing import Literal, overload

from ding.utils import ENV_REGISTRY, import_module

from .base_env import BaseEnv


def get_env_cls(cfg: dict) -> type[BaseEnv]:
    """The env class registered as ``cfg.type`` (after importing ``cfg.import_names``)."""
    if 'type' not in cfg:
        raise KeyError("env config lacks 'type' (the ENV_REGISTRY name, e.g. 'cartpole')")
    import_module(cfg.get('import_names', []))
    return ENV_REGISTRY.get_cls(cfg['type'])


@overload
def get_vec_env_setting(
    cfg: dict, collect: Literal[True] = ..., eval_: Literal[True] = ...
) -> tuple[type[BaseEnv], list[dict], list[dict]]: ...


@overload
def get_vec_env_setting(
    cfg: dict, collect: Literal[False], eval_: Literal[True] = ...
) -> tuple[type[BaseEnv], None, list[dict]]: ...


@overload
def get_vec_env_setting(
    cfg: dict, collect: bool = ..., eval_: bool = ...
) -> tuple[type[BaseEnv], list[dict] | None, list[dict] | None]: ...


def get_vec_env_setting(
    cfg: dict, collect: bool = True, eval_: bool = True
) -> tuple[type[BaseEnv], list[dict] | None, list[dict] | None]:
    """Return ``(env_fn, collector_env_cfgs, evaluator_env_cfgs)``.

    ``env_fn`` is the env class; build env ``i`` with ``env_fn(cfg=collector_env_cfgs[i])``.
    A list is None when its side was not asked for.
    """
    env_fn = get_env_cls(cfg)
    collector_env_cfg = env_fn.create_collector_env_cfg(cfg) if collect else None
    evaluator_env_cfg = env_fn.create_evaluator_env_cfg(cfg) if eval_ else None
    return env_fn, collector_env_cfg, evaluator_env_cfg
