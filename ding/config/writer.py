"""Writing a compiled config back to disk as a Python file (or YAML) that ``read_config`` loads again.

Secrets never reach these files: ``redact_secrets`` replaces the value of every secret key (``token``,
``secret``, ``password``, ``*_secret``, ...) with ``'<redacted>'`` in every config dump ding writes.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any

from ding.utils.jsonable import to_jsonable

_LOG = logging.getLogger('ding.config')
_INDENT = 4
_LINE_WIDTH = 100

REDACTED = '<redacted>'
"""What a config dump holds in place of a secret (``service.token`` and the like)."""
_SECRET_KEYS = frozenset(
    {'token', 'secret', 'password', 'passwd', 'api_key', 'auth_token', 'access_token', 'api_token', 'run_secret'}
)
# Not '_token' in general: an NLP config's 'eos_token' is no secret, and a dump must read back the same.
_SECRET_SUFFIXES = ('_secret', '_password')


def is_secret_key(key: Any) -> bool:
    """Whether a config key names a secret (its string value is redacted in dumps)."""
    name = str(key).lower()
    return name in _SECRET_KEYS or name.endswith(_SECRET_SUFFIXES)


def redact_secrets(value: Any) -> Any:
    """A copy of config data whose secret keys (``is_secret_key``) holding a string hold ``REDACTED``
    instead; other values (None: "generate one") are kept. Mappings come back as plain dicts."""
    if isinstance(value, Mapping):
        return {k: REDACTED if is_secret_key(k) and isinstance(v, str) else redact_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_secrets(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_secrets(v) for v in value)
    return value


def save_config_py(config_: Mapping, path: str, create_cfg: Mapping | None = None) -> None:
    """Write ``exp_config = {...}``, ``main_config = exp_config`` and ``create_config = {...}`` to ``path``.

    ``create_cfg`` defaults to one rebuilt from the ``type`` / ``import_names`` keys of ``config_``.
    Values that are not plain data (numbers, strings, bools, None, lists, tuples, dicts) are written as
    their ``repr`` string, with a warning, so the file always loads. Secrets are written as ``REDACTED``.
    """
    if create_cfg is None:
        create_cfg = create_config_from(config_)
    config_ = redact_secrets(config_)
    odd: list[str] = []
    text = (
        '"""Compiled config written by ding.config (load it with ding.config.read_config)."""\n\n'
        f'exp_config = {_format(config_, 0, "", odd)}\n'
        'main_config = exp_config\n\n'
        f'create_config = {_format(_strip_command_suffix(create_cfg), 0, "create_config", odd)}\n'
    )
    if odd:
        _LOG.warning(
            'save_config_py: %s: values that are not plain data were written as strings: %s', path, ', '.join(odd)
        )
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f'{path}.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(tmp, path)  # readers never see a half-written file


def save_config(config_: Mapping, path: str, type_: str = 'py', create_cfg: Mapping | None = None) -> None:
    """DI-engine's entry point: ``type_='py'`` (see ``save_config_py``) or ``'yaml'``; secrets redacted."""
    if type_ == 'py':
        save_config_py(config_, path, create_cfg)
    elif type_ == 'yaml':
        import yaml  # deferred: only paid by callers that want YAML

        data = {
            'main_config': redact_secrets(to_jsonable(config_, 'repr')),
            'create_config': to_jsonable(create_cfg or create_config_from(config_), 'repr'),
        }
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, 'w', encoding='utf-8') as f:
            yaml.safe_dump(data, f, sort_keys=False)
    else:
        raise ValueError(f"save_config: type_ must be 'py' or 'yaml', got {type_!r}")


def create_config_from(cfg: Mapping) -> dict:
    """Rebuild a create_config from the types a compiled config records."""
    out: dict = {}

    def take(dst: str, section: Any) -> None:
        if isinstance(section, Mapping) and section.get('type') is not None:
            out[dst] = {k: section[k] for k in ('type', 'import_names') if k in section}

    env = cfg.get('env', {}) or {}
    policy = cfg.get('policy', {}) or {}
    take('env', env)
    take('env_manager', env.get('manager'))
    take('policy', policy)
    take('collector', (policy.get('collect', {}) or {}).get('collector'))
    take('replay_buffer', (policy.get('other', {}) or {}).get('replay_buffer'))
    return out


def _strip_command_suffix(create_cfg: Mapping) -> dict:
    # Serial pipelines append '_command' to create_config.policy.type before compiling; the saved file
    # must hold the name the user wrote, or reading it back into a pipeline would append it twice.
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in create_cfg.items()}
    policy = out.get('policy')
    if isinstance(policy, dict) and isinstance(policy.get('type'), str) and policy['type'].endswith('_command'):
        policy['type'] = policy['type'][: -len('_command')]
    return out


def _format(value: Any, indent: int, path: str, odd: list[str]) -> str:
    """Python source for ``value``, nested dicts one key per line."""
    if isinstance(value, Mapping):
        if not value:
            return '{}'
        pad = ' ' * (indent + _INDENT)
        lines = ['{']
        for k, v in _ordered(value, top=not path):
            key_path = f'{path}.{k}' if path else str(k)
            lines.append(f'{pad}{_format_key(k)}: {_format(v, indent + _INDENT, key_path, odd)},')
        lines.append(' ' * indent + '}')
        return '\n'.join(lines)
    if isinstance(value, (list, tuple)):
        items = [_format(v, indent + _INDENT, f'{path}[{i}]', odd) for i, v in enumerate(value)]
        open_, close = ('[', ']') if isinstance(value, list) else ('(', ')')
        if isinstance(value, tuple) and len(items) == 1:
            items[0] += ','
        flat = open_ + ', '.join(items) + close
        if '\n' not in flat and indent + len(flat) < _LINE_WIDTH:
            return flat
        pad = ' ' * (indent + _INDENT)
        return open_ + '\n' + ''.join(f'{pad}{item},\n' for item in items) + ' ' * indent + close
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "-float('inf')"
        return repr(value)
    if hasattr(value, 'tolist') and callable(value.tolist):  # numpy scalars / arrays, torch tensors
        return _format(value.tolist(), indent, path, odd)
    odd.append(path)
    return repr(repr(value))


def _ordered(section: Mapping, top: bool) -> list[tuple]:
    """Items in reading order: what the section is (type, import_names) first, cfg_type last."""
    first = ('exp_name', 'seed', 'env', 'policy') if top else ('type', 'import_names')
    head = [(k, section[k]) for k in first if k in section]
    tail = [(k, v) for k, v in section.items() if k == 'cfg_type']
    rest = [(k, v) for k, v in section.items() if k not in first and k != 'cfg_type']
    return head + rest + tail


def _format_key(key: Any) -> str:
    return repr(key) if isinstance(key, (str, int, float, bool)) or key is None else repr(str(key))
