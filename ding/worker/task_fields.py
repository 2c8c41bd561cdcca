"""Checking the fields of a start task (from the coordinator, over HTTP) against the comm worker's own config.

A task may only name things inside what the worker was started with: its names (``exp_name``,
``instance_name``, ``policy_name``) are plain names, so ``./{exp_name}/...`` stays under the working
directory; its directories resolve inside the worker's configured ones; every ``import_names`` anywhere in
it (the policy's, the env's, the model's, ...), and the module of a gymnasium ``env_id`` written
'module:Env-v0', is one the worker's local config lists (``allowed_imports``).
A refused field raises ``TaskFieldError`` naming the field, before anything is imported, built or written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ding.utils.safe_paths import UnsafePathError, check_inside, check_plain_name

# Task fields that become one path component (a directory or file name) on the worker.
NAME_FIELDS = ('exp_name', 'instance_name', 'policy_name')
# Nested lists / dicts looked through for import_names at most this deep (configs are a few levels deep).
MAX_CONFIG_DEPTH = 32


class TaskFieldError(ValueError):
    """A start task's field is refused; ``field`` is its dotted name in the task (e.g. 'policy.import_names')."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"task field '{field}' refused: {reason}")
        self.field = field


def allowed_imports(cfg: Mapping[str, Any]) -> frozenset[str]:
    """The modules a comm worker may import for a task: its config's ``import_names`` (its own class) and
    ``allowed_import_names`` (the policy, env, model, ... modules of the run, from the local config)."""
    names: set[str] = set()
    for key in ('import_names', 'allowed_import_names'):
        value = cfg.get(key) or []
        names.update([value] if isinstance(value, str) else value)
    return frozenset(name for name in names if isinstance(name, str))


def config_import_names(cfg: Any) -> list[str]:
    """Every module named by an ``import_names`` key anywhere in ``cfg`` (e.g. the run's main config): what a
    worker started from that config may be asked to import."""
    found: list[str] = []
    for _, names in _import_fields(cfg, '', 0):
        found.extend(name for name in names if isinstance(name, str) and name not in found)
    return found


def _import_fields(value: Any, where: str, depth: int) -> Iterator[tuple[str, list[Any]]]:
    """(dotted field, the names it lists) for each ``import_names`` in ``value``."""
    if depth > MAX_CONFIG_DEPTH:
        raise TaskFieldError(where or '<task>', f'nested deeper than {MAX_CONFIG_DEPTH} levels')
    if isinstance(value, Mapping):
        for key, item in value.items():
            field = f'{where}.{key}' if where else str(key)
            if key == 'import_names':
                yield field, _as_name_list(item, field)
            elif key == 'env_id' and isinstance(item, str) and ':' in item:
                # gymnasium.make('module:Env-v0') imports 'module' first: the same as naming it in import_names.
                yield field, [item.split(':', 1)[0]]
            else:
                yield from _import_fields(item, field, depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _import_fields(item, f'{where}[{i}]', depth + 1)


def _as_name_list(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(name, str) for name in value):
        return list(value)
    raise TaskFieldError(field, f'must be a list of module names, got {value!r}')


def check_task_imports(task_info: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Refuse the task when any ``import_names`` in it lists a module the worker's config does not allow."""
    permitted = frozenset(allowed)
    for field, names in _import_fields(task_info, '', 0):
        refused = [name for name in names if name not in permitted]
        if refused:
            raise TaskFieldError(
                field,
                f'{refused} not in the modules this worker may import (its import_names and '
                f'allowed_import_names: {sorted(permitted)})',
            )


def check_task_names(task_info: Mapping[str, Any], fields: Iterable[str] = NAME_FIELDS, prefix: str = '') -> None:
    """Refuse the task when a name field it gives (not None / empty) is not a plain name; ``prefix`` is where
    ``task_info`` sits in the task (e.g. 'resume.')."""
    for field in fields:
        value = task_info.get(field)
        if value is None or value == '':
            continue
        try:
            check_plain_name(value, prefix + field)
        except UnsafePathError as exc:
            raise TaskFieldError(prefix + field, str(exc)) from None


def checked_path(task_info: Mapping[str, Any], field: str, roots: Iterable[str]) -> str | None:
    """The task's ``field`` resolved (None when it gives none) when it lies inside one of ``roots``."""
    value = task_info.get(field)
    if value is None or value == '':
        return None
    return path_inside(value, roots, field)


def path_inside(value: Any, roots: Iterable[str], field: str) -> str:
    """``value`` resolved, when inside one of ``roots``; else ``TaskFieldError`` naming ``field``."""
    try:
        return check_inside(value, roots, field)
    except UnsafePathError as exc:
        raise TaskFieldError(field, str(exc)) from None


__all__ = [
    'NAME_FIELDS',
    'TaskFieldError',
    'allowed_imports',
    'check_task_imports',
    'check_task_names',
    'checked_path',
    'config_import_names',
    'path_inside',
]
