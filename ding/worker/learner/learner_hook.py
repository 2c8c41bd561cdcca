"""Learner hooks: building them from a learner's ``hook`` config, and the public import path of the hook
classes and helpers (DI-engine's ``ding.worker.learner.learner_hook``).

The base classes are in ``hook_base``, the built-in hooks in ``checkpoint_hooks`` and ``log_hooks``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.config.validate import full_form_hook_problems
from ding.utils.registry import LEARNER_HOOK_REGISTRY

from .checkpoint_hooks import LoadCkptHook, SaveCkptHook, checkpoint_dir, write_checkpoint
from .hook_base import (
    DEFAULT_PRIORITY,
    POSITIONS,
    Hook,
    LearnerHook,
    add_learner_hook,
    iterations_done,
    merge_hooks,
    positive_int,
    register_learner_hook,
    show_hooks,
)
from .log_hooks import LogReduceHook, LogShowHook


def _freq_or_off(key: str, value: Any) -> int | None:
    if value is None or value is False or value == 0:
        return None
    return positive_int(value, f"learner hook config '{key}'")


def _flag(key: str, value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"learner hook config '{key}' must be True or False, got {value!r}")
    return value


def _build_log_show(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    freq = _freq_or_off(key, value)
    if freq is None:
        return None
    return LEARNER_HOOK_REGISTRY.get_cls('log_show')(
        'log_show', 20, position='after_iter', ext_args=EasyDict(freq=freq)
    )


def _build_load_ckpt(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    if value is None or value == '':
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"learner hook config '{key}' must be a checkpoint path ('' for none), got {value!r}")
    return LEARNER_HOOK_REGISTRY.get_cls('load_ckpt')(
        'load_ckpt', 20, position='before_run', ext_args=EasyDict(load_path=os.fspath(value))
    )


def _build_save_iter(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    freq = _freq_or_off(key, value)
    if freq is None:
        return None
    return LEARNER_HOOK_REGISTRY.get_cls('save_ckpt')(
        'save_ckpt_after_iter', 20, position='after_iter', ext_args=EasyDict(freq=freq, keep_n=keep_n)
    )


def _build_save_run(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    if not _flag(key, value):
        return None
    return LEARNER_HOOK_REGISTRY.get_cls('save_ckpt')('save_ckpt_after_run', 20, position='after_run')


def _build_log_reduce(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    if not _flag(key, value):
        return None
    return LEARNER_HOOK_REGISTRY.get_cls('log_reduce')('log_reduce_after_iter', 10, position='after_iter')


_SHORT_FORMS: dict[str, Callable[[str, Any, int | None], LearnerHook | None]] = {
    'load_ckpt_before_run': _build_load_ckpt,
    'log_show_after_iter': _build_log_show,
    'save_ckpt_after_iter': _build_save_iter,
    'save_ckpt_after_run': _build_save_run,
    'log_reduce_after_iter': _build_log_reduce,
}


def _build_full_form(key: str, value: dict[str, Any]) -> LearnerHook:
    problems = full_form_hook_problems(value)
    if problems:
        raise ValueError(f"learner hook config '{key}': " + '; '.join(problems))
    cls = LEARNER_HOOK_REGISTRY.get_cls(value['type'])
    ext_args = value.get('ext_args') or EasyDict()
    # DI-engine hooks read ext_args by attribute (ext_args.freq), as configs are EasyDicts there.
    ext_args = ext_args if isinstance(ext_args, EasyDict) else EasyDict(ext_args)
    return cls(
        value.get('name', key), value.get('priority', DEFAULT_PRIORITY), position=value['position'], ext_args=ext_args
    )


def build_learner_hook_by_cfg(hook_cfg: dict[str, Any]) -> dict[str, list[LearnerHook]]:
    """Build ``{position: [hooks sorted by priority]}`` from a learner's ``hook`` config.

    Short form: ``load_ckpt_before_run=path`` ('' = none), ``log_show_after_iter=N``,
    ``save_ckpt_after_iter=N``, ``save_ckpt_after_run=True``, ``log_reduce_after_iter=True``
    (0 / None / False switch a hook off), plus ``keep_n`` for ``save_ckpt_after_iter``.
    Full form: any key whose value is a dict ``{type, position, name?, priority?, ext_args?}``,
    ``type`` being a name registered with ``register_learner_hook``.
    """
    hooks: dict[str, list[LearnerHook]] = {p: [] for p in POSITIONS}
    keep_n = hook_cfg.get('keep_n', None)
    if keep_n is not None and (isinstance(keep_n, bool) or not isinstance(keep_n, int) or keep_n < 0):
        raise ValueError(f"learner hook config 'keep_n' must be an int >= 0 or None, got {keep_n!r}")
    for key, value in hook_cfg.items():
        if key == 'keep_n':
            continue
        hook: LearnerHook | None
        if isinstance(value, dict):
            hook = _build_full_form(key, value)
        elif key in _SHORT_FORMS:
            hook = _SHORT_FORMS[key](key, value, keep_n)
        else:
            raise ValueError(
                f"learner hook config: unknown key '{key}'; short-form keys are "
                f"{sorted(_SHORT_FORMS) + ['keep_n']}, a full-form hook's value must be a dict"
            )
        if hook is not None:
            add_learner_hook(hooks, hook)
    return hooks


__all__ = [
    'POSITIONS',
    'DEFAULT_PRIORITY',
    'Hook',
    'LearnerHook',
    'LoadCkptHook',
    'SaveCkptHook',
    'LogShowHook',
    'LogReduceHook',
    'add_learner_hook',
    'build_learner_hook_by_cfg',
    'checkpoint_dir',
    'iterations_done',
    'merge_hooks',
    'register_learner_hook',
    'show_hooks',
    'write_checkpoint',
]
