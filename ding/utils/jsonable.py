"""The one converter from Python, NumPy and torch values to plain JSON data."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal


def to_jsonable(value: Any, on_unknown: Literal['raise', 'repr'] = 'raise', finite: bool = False) -> Any:
    """``value`` as dicts (string keys), lists, numbers, strings, bools and None.

    Arrays and tensors become (nested) lists, NumPy and torch scalars numbers. ``on_unknown``: what an
    object of any other type becomes: a ``TypeError`` naming it (``'raise'``, for data a peer must
    understand) or its ``repr`` (for status and log output). ``finite``: NaN and infinities become their
    ``repr`` (``'nan'``, ``'inf'``) so the result is strict JSON.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value) if finite and not math.isfinite(value) else value
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v, on_unknown, finite) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, on_unknown, finite) for v in value]
    detach = getattr(value, 'detach', None)  # a torch tensor, without importing torch here
    if callable(detach):
        value = detach().cpu()
    tolist = getattr(value, 'tolist', None)  # NumPy arrays and scalars, torch tensors
    if callable(tolist):
        return to_jsonable(tolist(), on_unknown, finite)
    item = getattr(value, 'item', None)
    if callable(item):
        return to_jsonable(item(), on_unknown, finite)
    if on_unknown == 'repr':
        return repr(value)
    raise TypeError(f'{type(value).__name__} is not JSON data: {value!r}')


def exceeds_depth(value: Any, max_depth: int) -> bool:
    """Whether ``value`` (decoded JSON) nests objects/arrays more than ``max_depth`` levels deep. Iterative, so
    that checking a deep value cannot itself exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
