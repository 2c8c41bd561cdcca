"""Which checkpoint a run resumes from: the ``resume`` setting (``'never'``, ``'auto'`` or a path, see
``ding.worker.resume``), the newest valid checkpoint of a directory, a checkpoint verified before any work
starts, and a newer one under a checkpoint section's ``ckpt_uri``. Torch-free until a checkpoint is read."""

from __future__ import annotations

import os
from typing import Any

from ding.config.errors import ConfigError
from ding.utils.console import say

RESUME_NEVER = 'never'
RESUME_AUTO = 'auto'


class ResumeError(ConfigError):
    """The resume setting or the checkpoint it names cannot be used. The message names the file."""


# ---- choosing the checkpoint -----------------------------------------------------------------------
def resume_setting(cfg: Any, resume_arg: Any = None) -> Any:
    """The effective setting: the command-line value when given, else ``cfg.resume``, else DI-engine's
    ``policy.learn.resume_training`` (True: the checkpoint of ``learner.hook.load_ckpt_before_run``, or 'auto'
    without one), else 'never'."""
    value = resume_arg if resume_arg is not None else (cfg.get('resume') if cfg is not None else None)
    if value is None and cfg is not None:
        value = _di_engine_resume_training(cfg)
    if value is None or value is False or value == '':
        return RESUME_NEVER
    if value is True:
        return RESUME_AUTO
    if not isinstance(value, (str, os.PathLike)):
        raise ResumeError(f"resume must be 'auto', 'never' or a checkpoint path, got {value!r}")
    return os.fspath(value)


def _di_engine_resume_training(cfg: Any) -> Any:
    learn = (cfg.get('policy') or {}).get('learn') or {}
    flag = learn.get('resume_training')
    if flag is None or flag is False:
        return None
    if flag is not True:
        raise ResumeError(f'policy.learn.resume_training must be True or False, got {flag!r}')
    hook = (learn.get('learner') or {}).get('hook') or {}
    path = hook.get('load_ckpt_before_run')
    return path if isinstance(path, str) and path else RESUME_AUTO


def experiment_ckpt_dir(exp_name: str, instance_name: str = 'learner') -> str:
    """Where the learner named ``instance_name`` of ``./{exp_name}`` writes its checkpoints."""
    if instance_name == 'learner':
        return os.path.join('.', exp_name, 'ckpt')
    return os.path.join('.', exp_name, f'ckpt_{instance_name}')


def newest_valid_checkpoint(directory: str, not_before: float | None = None) -> str | None:
    """The newest checkpoint of ``directory`` that verifies; with ``not_before`` (a ``time.time()``
    value) only checkpoints written at or after that time count (a restarted worker must not pick up
    a previous run's files)."""
    from ding.utils.checkpoint import (  # deferred: checkpoints import torch; the coordinator uses this module torch-free
        CheckpointError,
        latest_valid_checkpoint,
        read_manifest,
        verify_checkpoint,
    )

    if not_before is None:
        return latest_valid_checkpoint(directory)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    candidates: list[tuple[int, float, str]] = []
    for name in names:
        if not name.endswith('.safetensors') or name.startswith('.'):
            continue
        path = os.path.join(directory, name)
        try:
            manifest = read_manifest(path)
        except CheckpointError:
            continue
        wall = manifest.get('wall_time')
        if not isinstance(wall, (int, float)) or wall < not_before:
            continue
        it = manifest.get('last_iter')
        candidates.append((it if isinstance(it, int) else -1, float(wall), path))
    for _, _, path in sorted(candidates, reverse=True):
        try:
            verify_checkpoint(path)
            return path
        except CheckpointError:
            continue
    return None


def check_checkpoint(path: str) -> str:
    """Verify the checkpoint at ``path`` without loading it into anything; return its data-file path.

    Raises ResumeError naming the file when it is missing, incomplete, corrupt or refused.
    """
    from ding.utils.checkpoint import (  # deferred: checkpoints import torch; the coordinator uses this module torch-free
        TORCH_SUFFIXES,
        CheckpointError,
        load_checkpoint,
        verify_checkpoint,
    )

    path = os.fspath(path)
    if path.endswith(TORCH_SUFFIXES):
        if not os.path.isfile(path):
            raise ResumeError(f"resume checkpoint '{path}' not found")
        try:
            load_checkpoint(path)  # a torch file has no manifest: reading it is the check
        except CheckpointError as exc:
            raise ResumeError(f'cannot resume from {path}: {exc}') from None
        return path
    data = path if path.endswith('.safetensors') else path + '.safetensors'
    if not os.path.exists(data) and not os.path.exists(path):
        raise ResumeError(f"resume checkpoint '{path}' not found")
    if not os.path.exists(data):
        raise ResumeError(f"cannot resume from '{path}': not a ding checkpoint (no '{data}')")
    try:
        verify_checkpoint(data)
    except CheckpointError as exc:
        raise ResumeError(f'cannot resume from {data}: {exc}') from None
    return data


def resolve_resume(
    cfg: Any, resume_arg: Any = None, ckpt_dir: str | None = None, not_before: float | None = None, logger: Any = None
) -> str | None:
    """The checkpoint to resume from, or None for a fresh start. Call it before any work.

    ``cfg`` is the main config (``exp_name`` and ``resume`` are read); ``resume_arg`` (the CLI value)
    wins over ``cfg.resume``. ``ckpt_dir`` overrides ``./{exp_name}/ckpt`` for 'auto'. Raises
    ResumeError for a bad setting or an explicit path that does not verify.
    """
    setting = resume_setting(cfg, resume_arg)
    if setting == RESUME_NEVER:
        return None
    if setting == RESUME_AUTO:
        exp_name = (cfg.get('exp_name') if cfg is not None else None) or 'default_experiment'
        directory = ckpt_dir or experiment_ckpt_dir(exp_name)
        path = newest_valid_checkpoint(directory, not_before)
        section = checkpoint_section(cfg)
        if section is not None and section.get('ckpt_uri'):
            path = newer_remote_checkpoint(section, directory, path, logger)
        _say(
            logger,
            f'resume=auto: resuming from {path}'
            if path
            else f'resume=auto: no valid checkpoint in {directory}; starting fresh',
        )
        return path
    if os.path.isdir(setting):
        path = newest_valid_checkpoint(setting, not_before)
        if path is None:
            raise ResumeError(f"resume: directory '{setting}' holds no valid checkpoint")
        return path
    return check_checkpoint(setting)


def checkpoint_section(cfg: Any) -> Any:
    """``policy.learn.learner.checkpoint`` of a (raw or compiled) main config, None when absent."""
    try:
        return cfg.policy.learn.learner.get('checkpoint')
    except AttributeError:
        return None


def newer_remote_checkpoint(section: Any, directory: str, local: str | None, logger: Any = None) -> str | None:
    """``local`` (the newest valid checkpoint of ``directory``, or None), unless the checkpoint ``latest`` names
    under ``section.ckpt_uri`` is newer: then that one, downloaded into ``directory`` and verified."""
    from ding.utils.checkpoint import CheckpointError, read_manifest  # deferred: checkpoints import torch
    from ding.utils.checkpoint_settings import CheckpointSettings  # deferred: fsspec, for a stored checkpoint only
    from ding.utils.remote_checkpoint import fetch_if_newer  # deferred: imports the checkpoint module (torch)

    try:
        # ./{exp}/ckpt_{instance} belongs to the learner named instance (see experiment_ckpt_dir)
        instance = os.path.basename(os.path.normpath(directory)).removeprefix('ckpt_')
        settings = CheckpointSettings.from_config(section).for_instance('learner' if instance == 'ckpt' else instance)
        local_iter = read_manifest(local).get('last_iter') if local else -1
        entry = fetch_if_newer(settings, directory, local_iter if isinstance(local_iter, int) else -1)
    except (CheckpointError, OSError, ImportError, ValueError, KeyError) as exc:  # OSError: ObjectStoreError
        raise ResumeError(f'resume=auto: cannot use the checkpoints at {section.get("ckpt_uri")}: {exc}') from None
    if entry is None:
        return local
    ids = (entry.get('replay_cursor') or {}).get('last_sampled_ids') or []
    _say(
        logger,
        f'resume=auto: downloaded {entry["key"]} (iteration {entry["last_iter"]}, env step {entry["last_step"]}) '
        f'from {settings.ckpt_uri} into {entry["path"]}' + (f'; last sampled transition: {ids[-1]}' if ids else ''),
    )
    return entry['path']


def _say(logger: Any, msg: str) -> None:
    if logger is not None:
        logger.info(msg)
    else:
        say(f'[ding] {msg}')


__all__ = [
    'RESUME_NEVER',
    'RESUME_AUTO',
    'ResumeError',
    'resume_setting',
    'resolve_resume',
    'check_checkpoint',
    'checkpoint_section',
    'newer_remote_checkpoint',
    'newest_valid_checkpoint',
    'experiment_ckpt_dir',
]
