"""The NaN guard's settings (``NAN_GUARD_DEFAULTS``, checked by ``check_nan_guard_config``) and its events: their
kinds and the listeners every event is reported to (how the run service counts them, without the learner
importing it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from numbers import Real
from typing import Any

_LOG = logging.getLogger('ding.nan_guard')

# Attribute names (``policy.get_attribute(name)``, i.e. ``policy._name``) that may hold optimizers:
# DI-engine's single-optimizer policies use 'optimizer'; actor-critic ones split it.
DEFAULT_OPTIMIZER_NAMES = (
    'optimizer',
    'optimizer_actor',
    'optimizer_critic',
    'optimizer_q',
    'optimizer_policy',
    'optimizer_value',
    'alpha_optim',
)

NAN_GUARD_DEFAULTS = dict(
    enable=True,
    lr_cut_factor=0.5,
    max_consecutive_bad=3,
    rollback=True,
    max_rollbacks=3,
)

# Event kinds, as counted in ``NanGuard.events`` and reported to the metrics module.
SKIPPED_STEP = 'skipped_step'
ROLLBACK = 'rollback'
ROLLBACK_FAILED = 'rollback_failed'
EVENT_KINDS = (SKIPPED_STEP, ROLLBACK, ROLLBACK_FAILED)


def check_nan_guard_config(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(cfg) - set(NAN_GUARD_DEFAULTS) - {'optimizer_names', 'cfg_type'})
    if unknown:
        raise ValueError(f'{where}: unknown key(s) {unknown}; valid keys: {sorted(NAN_GUARD_DEFAULTS)}')
    out = dict(NAN_GUARD_DEFAULTS)
    out.update({k: v for k, v in cfg.items() if k != 'cfg_type'})
    if not isinstance(out['enable'], bool):
        raise ValueError(f'{where}.enable must be True or False, got {out["enable"]!r}')
    if not isinstance(out['rollback'], bool):
        raise ValueError(f'{where}.rollback must be True or False, got {out["rollback"]!r}')
    factor = out['lr_cut_factor']
    if isinstance(factor, bool) or not isinstance(factor, Real) or not (0 < factor <= 1):
        raise ValueError(f'{where}.lr_cut_factor must be a number in (0, 1], got {factor!r}')
    for key, low in (('max_consecutive_bad', 1), ('max_rollbacks', 0)):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, Real) or v != int(v) or v < low:
            raise ValueError(f'{where}.{key} must be an integer >= {low}, got {v!r}')
        out[key] = int(v)
    names = out.get('optimizer_names', DEFAULT_OPTIMIZER_NAMES)
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ValueError(f'{where}.optimizer_names must be a list of attribute names, got {names!r}')
    out['optimizer_names'] = tuple(names)
    return out


# Called with (kind, n) for every event of every guard: how the run service counts them as metrics
# (``nan_guard_events_total{kind}``) without the learner importing it.
NanGuardListener = Callable[[str, int], None]
_LISTENERS: list[NanGuardListener] = []


def add_nan_guard_listener(listener: NanGuardListener) -> None:
    """Report every NaN-guard event to ``listener(kind, n)`` (added once however often this is called)."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)


def remove_nan_guard_listener(listener: NanGuardListener) -> None:
    """Stop reporting to ``listener`` (nothing happens when it was not added)."""
    if listener in _LISTENERS:
        _LISTENERS.remove(listener)


def publish_event(kind: str, n: int = 1) -> None:
    for listener in list(_LISTENERS):
        try:
            listener(kind, n)
        except Exception as exc:  # metrics must never break training
            _LOG.debug('nan_guard: event listener %r failed: %r', listener, exc)


__all__ = [
    'DEFAULT_OPTIMIZER_NAMES',
    'NAN_GUARD_DEFAULTS',
    'EVENT_KINDS',
    'SKIPPED_STEP',
    'ROLLBACK',
    'ROLLBACK_FAILED',
    'NanGuardListener',
    'add_nan_guard_listener',
    'remove_nan_guard_listener',
    'check_nan_guard_config',
    'publish_event',
]
