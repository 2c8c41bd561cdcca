"""Name -> class/function registries used to build components from config ``type`` strings."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable
from typing import Any


class Registry(dict):
    """A named mapping from ``type`` strings to classes or factory functions.

    ``register`` works as a decorator (``@REG.register('name')``) or as a call
    (``REG.register('name', cls)``); ``build('name', *args, **kwargs)`` instantiates.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def register(
        self, module_name: str | None = None, module: Callable | None = None, force_overwrite: bool = False
    ) -> Callable:
        if module is not None:
            self._add(module_name or module.__name__, module, force_overwrite)
            return module

        def decorator(fn: Callable) -> Callable:
            self._add(module_name or fn.__name__, fn, force_overwrite)
            return fn

        return decorator

    def _add(self, key: str, module: Callable, force_overwrite: bool) -> None:
        existing = self.get(key)
        if existing is not None and existing is not module and not force_overwrite:
            # Re-importing the same module (e.g. under a different path) re-registers an equal class.
            same = getattr(existing, '__qualname__', None) == getattr(module, '__qualname__', None) and getattr(
                existing, '__module__', None
            ) == getattr(module, '__module__', None)
            if not same:
                raise KeyError(f"{self.name} registry: '{key}' is already registered to {existing!r}")
        self[key] = module

    def get_cls(self, type_name: str) -> Any:
        """Return what is registered as ``type_name`` or raise a KeyError naming the known types.

        Typed ``Any``: a registry holds classes (and may hold factory functions) of any kind; callers
        annotate what they expect (``type[BaseEnv]``, ...)."""
        if type_name not in self:
            known = sorted(self.keys())
            close = difflib.get_close_matches(str(type_name), known, n=3)
            hint = f'; did you mean {close}?' if close else ''
            raise KeyError(f"{self.name} registry: unknown type '{type_name}'{hint} Known types: {known}")
        return self[type_name]

    def build(self, type_name: str, *args: Any, **kwargs: Any) -> Any:
        return self.get_cls(type_name)(*args, **kwargs)

    def query(self) -> list[str]:
        return sorted(self.keys())

    def query_details(self) -> dict[str, str]:
        return {
            k: f'{getattr(v, "__module__", "?")}.{getattr(v, "__qualname__", repr(v))}' for k, v in sorted(self.items())
        }

    def __repr__(self) -> str:
        return f'Registry({self.name!r}, {self.query()})'


# DI-engine modules that configs name in ``import_names`` and whose registrations live elsewhere in ding: importing
# the ding module registers the same name (DI-engine's 'deque' buffer is ding's NaiveReplayBuffer).
DI_ENGINE_MODULES: dict[str, str] = {
    'ding.data.buffer.deque_buffer_wrapper': 'ding.worker.replay_buffer',
}


def import_target(name: str) -> str:
    """The module to import for the ``import_names`` entry ``name`` (``DI_ENGINE_MODULES`` maps DI-engine's)."""
    return DI_ENGINE_MODULES.get(name, name)


def import_module(modules: Iterable[str]) -> None:
    """Import each dotted module path so that its ``@register`` decorators run."""
    for name in modules:
        importlib.import_module(import_target(name))


LEARNER_REGISTRY = Registry('learner')
POLICY_REGISTRY = Registry('policy')
MODEL_REGISTRY = Registry('model')
ENV_REGISTRY = Registry('env')
ENV_MANAGER_REGISTRY = Registry('env_manager')
BUFFER_REGISTRY = Registry('buffer')
SERIAL_COLLECTOR_REGISTRY = Registry('serial_collector')
PARALLEL_COLLECTOR_REGISTRY = Registry('parallel_collector')
SERIAL_EVALUATOR_REGISTRY = Registry('serial_evaluator')
COMM_LEARNER_REGISTRY = Registry('comm_learner')
COMM_COLLECTOR_REGISTRY = Registry('comm_collector')
COMMANDER_REGISTRY = Registry('commander')
COORDINATOR_REGISTRY = Registry('coordinator')
LEARNER_HOOK_REGISTRY = Registry('learner_hook')

REGISTRIES: dict[str, Registry] = {
    r.name: r
    for r in (
        LEARNER_REGISTRY,
        POLICY_REGISTRY,
        MODEL_REGISTRY,
        ENV_REGISTRY,
        ENV_MANAGER_REGISTRY,
        BUFFER_REGISTRY,
        SERIAL_COLLECTOR_REGISTRY,
        PARALLEL_COLLECTOR_REGISTRY,
        SERIAL_EVALUATOR_REGISTRY,
        COMM_LEARNER_REGISTRY,
        COMM_COLLECTOR_REGISTRY,
        COMMANDER_REGISTRY,
        COORDINATOR_REGISTRY,
        LEARNER_HOOK_REGISTRY,
    )
}
