"""Recursive merging of nested config dicts."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from easydict import EasyDict


def deep_merge_dicts(original: Mapping | None, new_data: Mapping | None) -> EasyDict:
    """Return a new EasyDict: ``original`` with ``new_data`` merged over it, recursively.

    A nested dict in ``new_data`` updates the dict at the same key in ``original`` key by key; any other
    value replaces it. Neither input is modified (the result shares no mutable values with them).
    """
    merged = copy.deepcopy(dict(original or {}))
    deep_update(merged, new_data or {})
    return EasyDict(merged)


def deep_update(target: dict, update: Mapping) -> dict:
    """Merge ``update`` into ``target`` in place (deep-copying the values taken from ``update``)."""
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), Mapping):
            sub = dict(target[key])
            deep_update(sub, value)
            target[key] = sub
        else:
            target[key] = copy.deepcopy(value)
    return target


def get_path(cfg: Mapping, path: str, default: Any = None) -> Any:
    """``get_path(cfg, 'policy.learn.batch_size')``: the nested value, or ``default`` if any level is missing."""
    node: Any = cfg
    for part in path.split('.'):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node
