"""Packages whose public names load on first use (so that importing the package stays cheap)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of ``package``: ``exports`` maps each public name to the submodule
    (relative to ``package``) that defines it; a name, once loaded, is kept in the package's namespace."""

    def __getattr__(name: str) -> Any:
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        value = getattr(import_module(target, package), name)
        vars(sys.modules[package])[name] = value  # later look-ups skip this function
        return value

    return __getattr__
