"""Checking a user config against the defaults of the components it configures, before any work starts.

Three kinds of problems are reported, all at once, in one ``ConfigError``:
unknown keys in strict sections (with the closest valid keys), values of the wrong type, and values
outside the bounds in ``ding.config.bounds`` (plus the cross-field rules there).
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping, MutableMapping
from typing import Any

from ding.utils.checkpoint_settings import SECTION as CHECKPOINT_SECTION
from ding.utils.checkpoint_settings import checkpoint_problems
from ding.utils.console import console_level_problem
from ding.utils.registry import LEARNER_HOOK_REGISTRY

from .bounds import (
    ALLOW_UNKNOWN_ENV,
    ALWAYS_KNOWN,
    BOUNDS,
    BOUNDS_SKIP,
    CHOICES,
    NOT_EXCEEDING,
    PIPELINE_KEYS,
    STRICT_SECTIONS,
    TOP_LEVEL_KEYS,
    TYPED_SECTIONS,
)
from .errors import ConfigError
from .interval import Interval
from .merge import deep_merge_dicts, get_path


def validate_config(cfg: Mapping, defaults: Mapping | None = None, allow_unknown_keys: bool = False) -> None:
    """Raise ``ConfigError`` listing every problem found in ``cfg``; return None if it is fine.

    ``defaults`` is the config tree of component defaults (what ``compile_config`` merges ``cfg`` over).
    Unknown keys are accepted when ``allow_unknown_keys`` is True, when ``cfg.allow_unknown_keys`` is
    True, or inside a section that sets ``allow_unknown_keys=True``.
    """
    defaults = defaults or {}
    allow = bool(allow_unknown_keys) or cfg.get('allow_unknown_keys') is True
    problems: list[str] = []
    if not allow:
        _check_top_level(cfg, defaults, problems)
    _check_keys_and_types(cfg, defaults, '', strict=False, typed=False, allow=allow, problems=problems)
    already_reported = {p.split(':', 1)[0] for p in problems}
    merged = deep_merge_dicts(defaults, cfg)
    _check_bounds(merged, '', problems, already_reported)
    _check_choices(merged, '', problems)
    _check_cross_fields(merged, problems)
    problems.extend(checkpoint_problems(get_path(cfg, CHECKPOINT_SECTION), CHECKPOINT_SECTION))
    raise_problems(problems)


def validate_section(
    user: Mapping,
    defaults: Mapping,
    path: str,
    bounds: Mapping[str, tuple[str, str]],
    problems: list[str],
    allow_unknown_keys: bool = False,
) -> None:
    """Add to ``problems`` what is wrong with the section ``user`` at ``path`` (e.g. ``system``): every key must
    be known to ``defaults`` (at any depth, except below an empty default dict), of the default's type, and
    within ``bounds`` (matched like ``BOUNDS``). ``allow_unknown_keys`` (or that key set True in a section) lifts
    the first rule."""
    allow = allow_unknown_keys or user.get('allow_unknown_keys') is True
    _check_keys_and_types(user, defaults, path, strict=True, typed=True, allow=allow, problems=problems)
    already_reported = {p.split(':', 1)[0] for p in problems}
    _check_bounds(deep_merge_dicts(defaults, user), path, problems, already_reported, bounds)


def check_env_section(env_cls: Any, env_cfg: Mapping, allow_unknown_keys: bool) -> None:
    """An env class with a ``check_config(env_cfg, allow_unknown_keys)`` classmethod (e.g. the generic
    ``gymnasium`` type) checks its (compiled) section itself: its problems raise ``ConfigError`` before any work."""
    check = getattr(env_cls, 'check_config', None)
    if callable(check):
        raise_problems(list(check(env_cfg, allow_unknown_keys=allow_unknown_keys)))


def fill_model_shapes(env_cls: Any, cfg: MutableMapping) -> None:
    """``policy.model.obs_shape`` / ``action_shape`` left out of a config are taken from the env's spaces when
    the env class can tell them (a ``model_shapes(env_cfg)`` classmethod, e.g. the generic ``gymnasium`` type)."""
    shapes_of = getattr(env_cls, 'model_shapes', None)
    model = (cfg.get('policy') or {}).get('model')
    if not callable(shapes_of) or not isinstance(model, MutableMapping):
        return
    missing = [key for key in ('obs_shape', 'action_shape') if model.get(key) is None]
    if missing:
        shapes = shapes_of(cfg['env'])
        model.update({key: shapes[key] for key in missing if key in shapes})


def unknown_keys_allowed() -> bool:
    """Whether ``DING_ALLOW_UNKNOWN_KEYS`` (1 / true / yes) accepts unknown keys everywhere."""
    return os.environ.get(ALLOW_UNKNOWN_ENV, '').strip().lower() in ('1', 'true', 'yes')


def raise_problems(problems: list[str]) -> None:
    """Raise one ``ConfigError`` listing ``problems`` (with a hint when keys are unknown); nothing if empty."""
    if not problems:
        return
    head = 'invalid config' if len(problems) == 1 else f'invalid config ({len(problems)} problems)'
    text = head + ':\n  ' + '\n  '.join(problems)
    if any(_UNKNOWN in p for p in problems):
        text += (
            '\n(If such keys are intended, e.g. in research code: set allow_unknown_keys=True in the '
            'section or at the top level, or DING_ALLOW_UNKNOWN_KEYS=1 in the environment.)'
        )
    raise ConfigError(text)


def _check_top_level(cfg: Mapping, defaults: Mapping, problems: list[str]) -> None:
    """A top-level key neither a component section nor one the pipelines read is a typo (``srvice=...``)."""
    known = list(defaults) + list(TOP_LEVEL_KEYS)
    for key in cfg:
        if key not in known and key not in ALWAYS_KNOWN:
            problems.append(_unknown_key_message(str(key), str(key), known))
    if cfg.get('console') is not None:
        problem = console_level_problem(cfg['console'], 'console')
        if problem:
            problems.append(problem)


_UNKNOWN = ': unknown key '

# Where a learner runs its hooks (``ding.worker.learner`` uses these), and the section of a config whose dict
# values are full-form hooks ``{type, position, name?, priority?, ext_args?}`` (docs/hooks.md).
LEARNER_HOOK_POSITIONS = ('before_run', 'after_run', 'before_iter', 'after_iter')
LEARNER_HOOK_SECTION = 'policy.learn.learner.hook'
FULL_FORM_HOOK_FIELDS = ('name', 'type', 'position', 'priority', 'ext_args')


def full_form_hook_problems(value: Mapping) -> list[str]:
    """What is wrong with a full-form learner hook config (empty when nothing): unknown or missing fields, a
    ``type`` no learner hook is registered as, a ``position`` the learner does not have, a bad ``priority``
    or ``ext_args``. The learner raises these when it builds the hook, ``compile_config`` reports them."""
    problems = []
    unknown = sorted(str(k) for k in set(value) - set(FULL_FORM_HOOK_FIELDS))
    if unknown:
        problems.append(f'unknown field(s) {unknown}; allowed: {sorted(FULL_FORM_HOOK_FIELDS)}')
    missing = [f for f in ('type', 'position') if value.get(f) is None]
    if missing:
        problems.append(f'missing field(s) {missing}')
    hook_type = value.get('type')
    if hook_type is not None:
        try:
            LEARNER_HOOK_REGISTRY.get_cls(hook_type)
        except KeyError as exc:
            problems.append(str(exc.args[0]))
    position = value.get('position')
    if position is not None and position not in LEARNER_HOOK_POSITIONS:
        problems.append(f'unknown position {position!r}; valid positions are {list(LEARNER_HOOK_POSITIONS)}')
    priority = value.get('priority')
    if priority is not None and (isinstance(priority, bool) or not _is_number(priority) or not priority >= 0):
        problems.append(f'priority must be a number >= 0 (lower runs first), got {priority!r}')
    ext_args = value.get('ext_args')
    if ext_args is not None and not isinstance(ext_args, Mapping):
        problems.append(f'ext_args must be a dict, got {ext_args!r}')
    return problems


# ---- unknown keys and types ------------------------------------------------------------------------
def _check_keys_and_types(
    user: Mapping, default: Mapping, path: str, strict: bool, typed: bool, allow: bool, problems: list[str]
) -> None:
    flag = user.get('allow_unknown_keys')
    if flag is not None and not isinstance(flag, bool):
        problems.append(f'{_join(path, "allow_unknown_keys")}: expected True or False, got {_show(flag)}')
    allow = allow or flag is True
    pipeline_keys = PIPELINE_KEYS.get(path, ())
    for key, value in user.items():
        key_path = _join(path, str(key))
        if key in ALWAYS_KNOWN:
            continue
        if path == LEARNER_HOOK_SECTION and isinstance(value, Mapping):
            problems.extend(f'{key_path}: {problem}' for problem in full_form_hook_problems(value))
            continue
        if key not in default:
            # An empty default section tells us nothing about its keys, so it cannot be strict.
            if strict and default and not allow and key not in pipeline_keys:
                problems.append(_unknown_key_message(key_path, str(key), list(default) + list(pipeline_keys)))
            continue
        expected = default[key]
        if typed:
            error = _type_error(value, expected)
            if error:
                problems.append(f'{key_path}: {error}')
                continue
        if isinstance(value, Mapping) and isinstance(expected, Mapping):
            # ``strict``/``typed`` describe the keys of the section being entered.
            child_strict = strict or key_path in STRICT_SECTIONS
            _check_keys_and_types(
                value,
                expected,
                key_path,
                strict=child_strict,
                typed=child_strict or key_path in TYPED_SECTIONS,
                allow=allow,
                problems=problems,
            )


def _unknown_key_message(key_path: str, key: str, known: list[Any]) -> str:
    valid = sorted({str(k) for k in known if k != 'cfg_type'})
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.6)
    parent = key_path.rpartition('.')[0] or '<top level>'
    msg = f"{key_path}{_UNKNOWN}'{key}' in {parent}"
    if close:
        msg += f'; did you mean {" or ".join(repr(c) for c in close)}?'
    return msg + f' Valid keys: {valid}'


def _type_error(value: Any, expected: Any) -> str | None:
    """Why ``value`` cannot stand where the default is ``expected``; None if it can."""
    if value is None or expected is None:
        return None  # None means "not set / off" for many keys; the component decides
    if isinstance(expected, bool):
        ok = isinstance(value, bool)
        want = 'True or False'
    elif isinstance(expected, int):
        ok = _is_integral(value)
        want = 'an integer'
    elif isinstance(expected, float):
        ok = _is_number(value)
        want = 'a number'
    elif isinstance(expected, str):
        ok = isinstance(value, str)
        want = 'a string'
    elif isinstance(expected, (list, tuple)):
        ok = isinstance(value, (list, tuple))
        want = 'a list'
    elif isinstance(expected, Mapping):
        ok = isinstance(value, Mapping)
        want = 'a dict (section)'
    else:
        return None
    return None if ok else f'expected {want} (default {_show(expected)}), got {_show(value)}'


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integral(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and value.is_integer()  # 1e5 written for 100000 is fine


# ---- bounds ------------------------------------------------------------------------------------------
def _check_bounds(
    node: Mapping, path: str, problems: list[str], skip: set, bounds: Mapping[str, tuple[str, str]] = BOUNDS
) -> None:
    for key, value in node.items():
        key_path = _join(path, str(key))
        if key_path in BOUNDS_SKIP or key_path in skip:
            continue
        if isinstance(value, Mapping):
            _check_bounds(value, key_path, problems, skip, bounds)
            continue
        spec = _bound_for(key_path, bounds)
        if spec is None or value is None:
            continue
        kind, interval = spec
        if kind == 'int' and not _is_integral(value):
            problems.append(f'{key_path}: expected an integer, got {_show(value)}')
            continue
        if kind == 'number' and not _is_number(value):
            problems.append(f'{key_path}: expected a number, got {_show(value)}')
            continue
        bound = Interval.parse(interval)
        if math.isnan(value) or value not in bound:
            problems.append(f'{key_path} = {_show(value)} is out of range: must be {bound.describe()}')


def _check_choices(node: Mapping, path: str, problems: list[str]) -> None:
    """Keys of ``CHOICES`` must hold one of their values."""
    for key, value in node.items():
        key_path = _join(path, str(key))
        if isinstance(value, Mapping):
            _check_choices(value, key_path, problems)
            continue
        allowed = _bound_for(key_path, CHOICES)
        if allowed is not None and not any(type(value) is type(a) and value == a for a in allowed):
            problems.append(f'{key_path} = {_show(value)} is not one of {list(allowed)}')


def _bound_for(key_path: str, bounds: Mapping[str, Any] = BOUNDS) -> Any:
    parts = key_path.split('.')
    for suffix, spec in bounds.items():
        want = suffix.split('.')
        if parts[-len(want) :] == want:
            return spec
    return None


# ---- cross-field rules -------------------------------------------------------------------------------
def _check_cross_fields(cfg: Mapping, problems: list[str]) -> None:
    for condition, pairs in NOT_EXCEEDING:
        if not get_path(cfg, condition):
            continue
        for small_key, large_key in pairs:
            small, large = get_path(cfg, small_key), get_path(cfg, large_key)
            if _is_number(small) and _is_number(large) and small > large:
                problems.append(
                    f'{small_key} = {_show(small)} must not exceed {large_key} = {_show(large)} when {condition} '
                    f'is True (a training minibatch cannot be larger than the collected rollout)'
                )


# ---- helpers -----------------------------------------------------------------------------------------
def _join(path: str, key: str) -> str:
    return f'{path}.{key}' if path else key


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + '...'
    return f'{type(value).__name__} {text}'


def coerce_integers(
    cfg: MutableMapping, defaults: Mapping, path: str = '', bounds: Mapping[str, tuple[str, str]] = BOUNDS
) -> None:
    """In place: integral floats (``1e5``) become ints where the default is an int or the bounds say 'int'.

    ``validate_config`` accepts ``replay_buffer_size=1e5``; components then get the int they expect.
    """
    for key, value in cfg.items():
        key_path = _join(path, str(key))
        if key_path in BOUNDS_SKIP:
            continue
        default = defaults.get(key) if isinstance(defaults, Mapping) else None
        if isinstance(value, MutableMapping):
            coerce_integers(value, default if isinstance(default, Mapping) else {}, key_path, bounds)
        elif isinstance(value, float) and value.is_integer():
            spec = _bound_for(key_path, bounds)
            wants_int = (isinstance(default, int) and not isinstance(default, bool)) or (
                spec is not None and spec[0] == 'int'
            )
            if wants_int:
                cfg[key] = int(value)
