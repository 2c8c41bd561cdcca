"""Pieces of the comm collectors: watching the policy file, naming and removing sample files, resources."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from ding.utils.checkpoint import manifest_path
from ding.utils.file_transport import load_policy, split_data_id
from ding.worker.task_fields import allowed_imports, check_task_imports, check_task_names, checked_path

POLICY_SUFFIX = '.safetensors'

_StatKey = tuple[tuple[int, int, int], tuple[int, int, int] | None] | None


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class PolicyFileWatcher:
    """Reads a policy file (``save_policy`` format) only when it changed since the last look.

    ``poll(path)`` returns ``{'model': state_dict, 'iter': policy_iter}`` for a new version, None when the
    file (data and manifest) is unchanged since the last call, and raises ``FileNotFoundError`` (missing) or
    ``CheckpointError`` (truncated, corrupt) naming the path. Each version is read at most once, good or bad:
    a bad file is reported once and tried again only after it changes (e.g. the learner's next write, or
    the second half of its data-then-manifest rename).
    """

    def __init__(self) -> None:
        self._seen: dict[str, _StatKey] = {}

    def poll(self, path: str) -> dict[str, Any] | None:
        data = _stat(path)
        key: _StatKey = None if data is None else (data, _stat(manifest_path(path)))
        if path in self._seen and self._seen[path] == key:
            return None
        self._seen[path] = key
        if data is None:
            raise FileNotFoundError(f'policy file {path} not found (not published yet?)')
        state, policy_iter = load_policy(path)
        return {'model': state, 'iter': policy_iter}

    def forget(self) -> None:
        """Read every file again at the next poll (a new task starts from whatever is there)."""
        self._seen.clear()


def policy_file_path(path_policy: str | None, policy_name: str | None, default_dir: str) -> str:
    """The policy file a collector task reads.

    The coordinator sends the file itself (``.../policy_X.safetensors``); a directory (or nothing: the comm
    collector's ``path_policy``) is completed with ``{policy_name}.safetensors``.
    """
    if path_policy and path_policy.endswith(POLICY_SUFFIX):
        return path_policy
    directory = path_policy or default_dir
    return os.path.join(directory, (policy_name or 'policy_learner0') + POLICY_SUFFIX)


def check_collector_task(cfg: Any, task_info: dict[str, Any]) -> tuple[str, str]:
    """Refuse a start task that names anything outside what the comm collector was started with
    (``TaskFieldError`` naming the field; see ``ding.worker.task_fields``): plain names, allowed
    ``import_names``, the policy file inside ``cfg.path_policy`` and ``path_data`` inside ``cfg.path_data``.
    Returns the task's policy file and data directory, resolved (the config's where the task names none)."""
    check_task_names(task_info)
    check_task_imports(task_info, allowed_imports(cfg))
    # DI-engine's tasks name the file 'policy_update_path'.
    field = 'path_policy' if task_info.get('path_policy') else 'policy_update_path'
    given_policy = checked_path(task_info, field, [cfg.path_policy])
    policy_file = policy_file_path(given_policy, task_info.get('policy_name'), cfg.path_policy)
    path_data = checked_path(task_info, 'path_data', [cfg.path_data]) or cfg.path_data
    return policy_file, path_data


_UNSAFE = re.compile(r'[^A-Za-z0-9_.-]+')


def file_prefix(*parts: str) -> str:
    """A sample file name prefix from task names: only ``[A-Za-z0-9_.-]``, no leading dot, bounded length."""
    text = _UNSAFE.sub('-', '_'.join(p for p in parts if p)).lstrip('.') or 'samples'
    return text[:96]


def remove_sample_files(path_data: str, data_ids: Iterable[str]) -> int:
    """Delete the files (data + manifest) the given data_ids live in; return how many were removed."""
    names = set()
    for data_id in data_ids:
        try:
            names.add(split_data_id(data_id)[0])
        except ValueError:
            continue
    removed = 0
    for name in names:
        path = os.path.join(path_data, name)
        for p in (path, manifest_path(path)):
            try:
                os.remove(p)
            except OSError:  # already gone, or not ours to remove
                continue
            if p == path:
                removed += 1
    return removed


def resource_info() -> dict[str, int]:
    """What the ``resource`` task answers: CPU cores and visible GPUs of this process."""
    import torch

    gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {'cpu': os.cpu_count() or 1, 'gpu': gpu}


__all__ = [
    'PolicyFileWatcher',
    'check_collector_task',
    'policy_file_path',
    'file_prefix',
    'remove_sample_files',
    'resource_info',
]
