"""Counters, log dicts and seeding."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from numbers import Number
from typing import Any

import numpy as np


class CountVar:
    """An integer counter with ``val``, ``add`` and ``update``."""

    def __init__(self, init_val: int = 0) -> None:
        self._val = init_val

    @property
    def val(self) -> int:
        return self._val

    def update(self, val: int) -> None:
        self._val = val

    def add(self, add_num: int = 1) -> None:
        self._val += add_num

    def __repr__(self) -> str:
        return f'CountVar({self._val})'


class LogDict(dict):
    """A dict that stores tensors and arrays as plain Python numbers / lists."""

    @staticmethod
    def _plain(value: Any) -> Any:
        if isinstance(value, (Number, str, bool)) or value is None:
            return value
        if hasattr(value, 'detach'):  # torch.Tensor, without importing torch here
            value = value.detach().cpu()
            return value.item() if value.numel() == 1 else value.tolist()
        if isinstance(value, np.ndarray):
            return value.item() if value.size == 1 else value.tolist()
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, (list, tuple)):
            return [LogDict._plain(v) for v in value]
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, self._plain(value))

    # dict.update's overloads (pairs, mappings) cannot be restated for one plain signature
    def update(self, other: Mapping[Any, Any] | Iterable[tuple[Any, Any]] = (), **kwargs: Any) -> None:  # type: ignore[override]
        for k, v in dict(other, **kwargs).items():
            self[k] = v


def set_pkg_seed(seed: int, use_cuda: bool = True) -> None:
    """Seed Python's, NumPy's and torch's generators (CUDA too when asked and available)."""
    import torch  # deferred: ding.utils stays importable without torch (the coordinator process)

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if use_cuda and torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
