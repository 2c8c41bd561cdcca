"""Reading config files: Python modules (DI-engine style) and YAML, alone or combined (``base``, lists)."""

from __future__ import annotations

import copy
import importlib.util
import itertools
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, cast

from easydict import EasyDict

from .errors import ConfigError
from .merge import deep_merge_dicts

_module_ids = itertools.count()

# part -> (exact variable name, suffix of the DI-engine-style fallback names)
_PARTS = {
    'main_config': ('main_config', '_config'),
    'create_config': ('create_config', '_create_config'),
    'system_config': ('system_config', '_system_config'),
}


# A config file's top-level key naming the files it builds on (paths relative to the file itself).
BASE_KEY = 'base'

_Parts = dict[str, 'EasyDict | None']


def read_config(path: str | os.PathLike | Sequence[str | os.PathLike]) -> tuple[EasyDict, EasyDict, EasyDict | None]:
    """Load ``(main_config, create_config, system_config or None)`` from a ``.py`` or ``.yaml/.yml`` file.

    A Python file defines ``main_config`` and ``create_config`` (and optionally ``system_config``); when
    those names are absent, the unique module-level dicts named ``*_config`` / ``*_create_config`` /
    ``*_system_config`` are used instead. A YAML file has those three names as top-level keys.
    The results are deep copies, so changing them does not change the module's objects.

    Combining files: a file's ``base`` (a path or a list of paths, relative to that file) names the files it
    builds on; they are read first, in order, and this file's dicts are merged over theirs. ``path`` may also
    be a list of files, merged the same way (later files win). Only the combined result needs
    ``main_config`` and ``create_config``: a file can be a fragment, e.g. a system config from ``configs/``.
    """
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if not paths:
        raise ConfigError('read_config: no config file given')
    parts: _Parts = dict.fromkeys(_PARTS)
    for p in paths:
        _merge_parts(parts, _read_with_bases(os.fspath(p), ()))
    where = (
        f"config file '{os.fspath(paths[0])}'" if len(paths) == 1 else f'config files {[os.fspath(p) for p in paths]}'
    )
    for part in ('main_config', 'create_config'):
        if parts[part] is None:
            exact, suffix = _PARTS[part]
            raise ConfigError(
                f"{where}: no '{exact}' defined (expected a dict named '{exact}' or a single dict named "
                f"'*{suffix}', here or in a file named by '{BASE_KEY}')"
            )
    main, create = cast(EasyDict, parts['main_config']), cast(EasyDict, parts['create_config'])
    return main, create, parts['system_config']


def _read_with_bases(path: str, chain: tuple[str, ...]) -> _Parts:
    """The parts of one file merged over those of the files its ``base`` names (recursively)."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file '{path}' not found" + (f' (named in {chain[-1]})' if chain else ''))
    real = os.path.realpath(path)
    if real in chain:
        raise ConfigError(f"config file '{path}': '{BASE_KEY}' loops back to itself ({' -> '.join(chain + (real,))})")
    namespace = _load_namespace(path)
    parts: _Parts = dict.fromkeys(_PARTS)
    for base in _base_paths(namespace, path):
        _merge_parts(parts, _read_with_bases(base, chain + (real,)))
    own = {part: _pick(namespace, part, path) for part in _PARTS}
    _merge_parts(parts, own)
    return parts


def _load_namespace(path: str) -> dict[str, Any]:
    ext = os.path.splitext(path)[1].lower()
    if ext == '.py':
        return _exec_python(path)
    if ext in ('.yaml', '.yml'):
        return _load_yaml(path)
    raise ConfigError(f"config file '{path}': unsupported extension '{ext}' (use .py, .yaml or .yml)")


def _base_paths(namespace: Mapping[str, Any], path: str) -> list[str]:
    value = namespace.get(BASE_KEY)
    if value is None:
        return []
    items = [value] if isinstance(value, (str, os.PathLike)) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, (str, os.PathLike)) for v in items):
        raise ConfigError(f"config file '{path}': '{BASE_KEY}' must be a path or a list of paths, got {value!r}")
    here = os.path.dirname(os.path.abspath(path))
    return [os.path.join(here, os.fspath(v)) for v in items]


def _merge_parts(into: _Parts, new: _Parts) -> None:
    for part, value in new.items():
        if value is not None:
            into[part] = deep_merge_dicts(into[part], value) if into[part] is not None else value


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
    import yaml  # deferred: only YAML users pay for its import

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


def _pick(namespace: Mapping[str, Any], part: str, path: str) -> EasyDict | None:
    """The dict a file defines for ``part`` (deep-copied), or None when it defines none."""
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
            return None
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
