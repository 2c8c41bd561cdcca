"""Learner hooks: the base classes, positions and ordering (the built-in hooks live in ``checkpoint_hooks``
and ``log_hooks``; ``learner_hook`` builds them from a config and is the public import path).

Positions are ``before_run`` / ``after_run`` (around ``start()``, or called by the serial entry) and
``before_iter`` / ``after_iter`` (around every ``train()`` call). Within a position, hooks run in
ascending ``priority``; hooks of equal priority keep the order they were added in.

A hook's ``__call__(engine)`` receives the learner. Inside an ``after_iter`` hook,
``engine.last_iter.val`` is still the number of the iteration that just ran (it advances after the
hooks), so ``engine.last_iter.val + 1`` iterations are complete at that point.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from numbers import Real
from typing import Any

from easydict import EasyDict

from ding.config.validate import LEARNER_HOOK_POSITIONS
from ding.utils.registry import LEARNER_HOOK_REGISTRY

POSITIONS = LEARNER_HOOK_POSITIONS
# DI-engine's default priority for a full-form hook that does not name one.
DEFAULT_PRIORITY = 100


class Hook(ABC):
    """Something to run at a fixed point of an engine's life; lower ``priority`` runs first."""

    def __init__(self, name: str, priority: float, **kwargs: Any) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f'hook name must be a non-empty string, got {name!r}')
        if isinstance(priority, bool) or not isinstance(priority, Real) or math.isnan(priority):
            raise ValueError(f"hook '{name}': priority must be a number >= 0, got {priority!r}")
        if priority < 0:
            raise ValueError(f"hook '{name}': priority must be >= 0 (lower runs first), got {priority!r}")
        self._name: str = name
        self._priority: float = priority
        # DI-engine's Hook accepted and ignored extra keyword arguments; keep them for subclasses.
        self._kwargs = kwargs

    @property
    def name(self) -> str:
        return self._name

    @property
    def priority(self) -> float:
        return self._priority

    @abstractmethod
    def __call__(self, engine: Any) -> Any:
        """Do the hook's work on ``engine`` (for a ``LearnerHook``: the learner)."""


class LearnerHook(Hook):
    """A hook bound to one of the learner's positions (see ``POSITIONS``)."""

    positions = list(POSITIONS)

    def __init__(
        self,
        name: str,
        priority: float,
        position: str | None = None,
        ext_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, **kwargs)
        if position not in POSITIONS:
            raise ValueError(
                f"learner hook '{name}': unknown position {position!r}; valid positions are {list(POSITIONS)}"
            )
        self._position = position
        # Kept as given (not converted): EasyDict would copy lists the caller may share with the hook.
        self._ext_args = ext_args if ext_args is not None else EasyDict()

    @property
    def position(self) -> str:
        return self._position

    @property
    def ext_args(self) -> dict[str, Any]:
        return self._ext_args

    def __repr__(self) -> str:
        return f'{type(self).__name__}(name={self._name!r}, priority={self._priority}, position={self._position!r})'


def iterations_done(engine: Any) -> int:
    """Iterations completed so far; inside ``after_iter`` hooks that is ``last_iter.val + 1``."""
    return engine.last_iter.val + (1 if getattr(engine, 'in_after_iter', False) else 0)


def positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise ValueError(f'{what} must be a positive integer, got {value!r}')
    return int(value)


def register_learner_hook(name: str, hook_type: type) -> None:
    """Make ``hook_type`` (a ``LearnerHook`` subclass) buildable as ``type=name`` in a hook config."""
    if not (isinstance(hook_type, type) and issubclass(hook_type, LearnerHook)):
        raise TypeError(f"register_learner_hook('{name}'): {hook_type!r} is not a LearnerHook subclass")
    LEARNER_HOOK_REGISTRY.register(name, hook_type)


def add_learner_hook(hooks: dict[str, list[LearnerHook]], hook: LearnerHook) -> None:
    """Insert ``hook`` after every hook of its position whose priority is <= its own."""
    if not isinstance(hook, LearnerHook):
        raise TypeError(f'add_learner_hook: {hook!r} is not a LearnerHook')
    if hook.position not in hooks:
        raise ValueError(
            f"add_learner_hook: hook '{hook.name}' has position {hook.position!r}, not one of {list(hooks)}"
        )
    bucket = hooks[hook.position]
    idx = len(bucket)
    while idx > 0 and bucket[idx - 1].priority > hook.priority:
        idx -= 1
    bucket.insert(idx, hook)


def merge_hooks(
    hooks1: dict[str, list[LearnerHook]], hooks2: dict[str, list[LearnerHook]]
) -> dict[str, list[LearnerHook]]:
    """Merge two ``{position: [hooks]}`` dicts; at equal priority ``hooks1``'s come first."""
    if set(hooks1) != set(hooks2):
        raise ValueError(f'merge_hooks: positions differ: {sorted(hooks1)} vs {sorted(hooks2)}')
    # sorted() is stable, which keeps registration order among equal priorities.
    return {k: sorted(list(hooks1[k]) + list(hooks2[k]), key=lambda h: h.priority) for k in hooks1}


def show_hooks(hooks: dict[str, list[LearnerHook]]) -> str:
    """Print (and return) one line per position listing its hooks in call order."""
    lines = [
        f'{pos}: {[f"{h.name}({type(h).__name__}, priority={h.priority})" for h in hs]}' for pos, hs in hooks.items()
    ]
    text = '\n'.join(lines)
    print(text)
    return text
