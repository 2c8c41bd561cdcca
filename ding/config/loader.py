"""Reading config files: Python modules (DI-engine style) and YAML."""

from __future__ import annotations

import copy
import importlib.util
import itertools
import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any

from easydict import EasyDict

from .errors import ConfigError

_module_ids = itertools.count()

# part -> (exact variable name, suffix of the DI-engine-style fallback names)
_PARTS = {
    'main_config': ('main_config', '_config'),
    'create_config': ('create_config', '_create_config'),
    'system_config': ('system_config', '_system_config'),
}


def read_config(path: str) -> tuple[EasyDict, EasyDict, EasyDict | None]:
    """Load ``(main_config, create_config, system_config or None)`` from a ``.py`` or ``.yaml/.yml`` file.

    A Python file defines ``main_config`` and ``create_config`` (and optionally ``system_config``); when
    those names are absent, the unique module-level dicts named ``*_config`` / ``*_create_config`` /
    ``*_system_config`` are used instead. A YAML file has those three names as top-level keys.
    The results are deep copies, so changing them does not change the module's objects.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError(f"config file '{path}' not found")
    ext = os.path.splitext(path)[1].lower()
    if ext == '.py':
        namespace = _exec_python(path)
    elif ext in ('.yaml', '.yml'):
        namespace = _load_yaml(path)
    else:
        raise ConfigError(f"config file '{path}': unsupported extension '{ext}' (use .py, .yaml or .yml)")
    main = _pick(namespace, 'main_config', path, required=True)
    create = _pick(namespace, 'create_config', path, required=True)
    system = _pick(namespace, 'system_config', path, required=False)
    return main, create, system


def _exec_python(path: str) -> dict[str, Any]:
    """Run the file as a module (under a private name, removed from sys.modules afterwards)."""
    name = f'_ding_user_config_{next(_module_ids)}'
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    if spec is None or spec.loader is None:
        raise ConfigError(f"config file '{path}': cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Present in sys.modules only while it runs: dataclasses and pickling look the module up there.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        where = e.filename or path
        line = f', line {e.lineno}' if e.lineno else ''
        text = f'\n    {e.text.rstrip()}' if e.text else ''
        raise ConfigError(f"config file '{path}': syntax error in {where}{line}: {e.msg}{text}") from e
    except Exception as e:
        raise ConfigError(f"config file '{path}': {type(e).__name__} while running it{_line_in(e, path)}: {e}") from e
    finally:
        sys.modules.pop(name, None)
    return {k: v for k, v in vars(module).items() if not k.startswith('_')}


def _line_in(exc: BaseException, path: str) -> str:
    target = os.path.abspath(path)
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == target]
    return f' (line {lines[-1]})' if lines else ''


def _load_yaml(path: str) -> dict[str, Any]:
    import yaml  # only YAML users pay for it

    try:
        with open(path, encoding='utf-8') as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as e:
        mark = getattr(e, 'problem_mark', None)
        line = f', line {mark.line + 1}' if mark is not None else ''
        raise ConfigError(f"config file '{path}': invalid YAML{line}: {e}") from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file '{path}': the top level must be a mapping with main_config / create_config "
            f'(/ system_config), got {type(data).__name__}'
        )
    return data


def _pick(namespace: Mapping[str, Any], part: str, path: str, required: bool) -> EasyDict | None:
    exact, suffix = _PARTS[part]
    if exact in namespace:
        value, name = namespace[exact], exact
    else:
        candidates = _fallback_candidates(namespace, part, suffix)
        if len(candidates) > 1:
            raise ConfigError(
                f"config file '{path}': no '{exact}' variable, and several candidates "
                f'{sorted(candidates)}; define {exact} = <one of them>'
            )
        if not candidates:
            if not required:
                return None
            raise ConfigError(
                f"config file '{path}': no '{exact}' defined (expected a dict named '{exact}' or a "
                f"single dict named '*{suffix}')"
            )
        name, value = next(iter(candidates.items()))
    if not isinstance(value, Mapping):
        raise ConfigError(f"config file '{path}': '{name}' must be a dict, got {type(value).__name__}")
    return EasyDict(copy.deepcopy(dict(value)))


def _fallback_candidates(namespace: Mapping[str, Any], part: str, suffix: str) -> dict[str, Any]:
    """Module-level dicts whose names end with ``suffix`` (aliases of one object count once)."""
    other_suffixes = [s for p, (_, s) in _PARTS.items() if p != part and s.endswith(suffix) and s != suffix]
    found: dict[str, Any] = {}
    seen = set()
    for name, value in namespace.items():
        if not name.endswith(suffix) or not isinstance(value, Mapping):
            continue
        if name in ('main_config', 'create_config', 'system_config') or any(name.endswith(s) for s in other_suffixes):
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        found[name] = value
    return found
