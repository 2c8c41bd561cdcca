"""Trajectories and policy weights passed between parallel workers through a shared directory.

Files are checkpoints (safetensors + manifest, see ``ding.utils.checkpoint``): written atomically,
sha256-verified on read, never unpickled. A sample is referenced by a ``data_id`` of the form
``'<file name>#<index>'`` relative to ``path_data``.
"""
from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch

from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .file_names import split_data_id  # noqa: F401 -- part of this module's API

POLICY_FILE_PREFIX = 'policy_'


def _to_columns(samples: List[Dict[str, Any]]) -> Dict[str, Any] | None:
    """Stack same-shaped tensors key by key: one tensor per key writes and reads far faster than many."""
    keys = samples[0].keys()
    if any(s.keys() != keys for s in samples):
        return None
    columns: Dict[str, Any] = {}
    for key in keys:
        values = [s[key] for s in samples]
        first = values[0]
        if isinstance(first, torch.Tensor) and all(
                isinstance(v, torch.Tensor) and v.shape == first.shape and v.dtype == first.dtype for v in values):
            columns[key] = torch.stack(values)
        else:
            columns[key] = values
    return columns


def save_samples(path_data: str, file_stem: str, samples: List[Dict[str, Any]]) -> List[str]:
    """Write ``samples`` as one file named ``file_stem`` in ``path_data``; return one data_id per sample."""
    if not samples:
        return []
    os.makedirs(path_data, exist_ok=True)
    columns = _to_columns(samples)
    state = {'columns': columns} if columns is not None else {'samples': samples}
    final = save_checkpoint(os.path.join(path_data, file_stem), state)
    name = os.path.basename(final)
    return [f'{name}#{i}' for i in range(len(samples))]


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


class SampleReader:
    """Loads samples by data_id, caching the most recently read files.

    A replay buffer samples uniformly over every file it refers to, so a batch hits many files: the cache
    keeps whole files (as loaded: one stacked tensor per key, no per-sample objects) up to ``cache_bytes``
    of tensor data (and at most ``cache_files`` files), least recently used out first. A sample's dict is
    built on each read (views into the file's tensors).
    """

    def __init__(self, path_data: str, cache_files: int = 4096, cache_bytes: int = 256 * 1024 * 1024) -> None:
        self.path_data = path_data
        # name -> (columns dict or None, samples list or None, n samples, tensor bytes)
        self._cache: 'OrderedDict[str, Tuple[Any, Any, int, int]]' = OrderedDict()
        self._cache_files = cache_files
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def _file(self, name: str) -> Tuple[Any, Any, int, int]:
        with self._lock:
            entry = self._cache.get(name)
            if entry is not None:
                self._cache.move_to_end(name)
                return entry
        state = load_checkpoint(os.path.join(self.path_data, name))
        if 'columns' in state:
            columns = state['columns']
            n = len(next(iter(columns.values()))) if columns else 0
            entry = (columns, None, n, _tensor_bytes(columns))
        else:
            samples = state['samples']
            entry = (None, samples, len(samples), _tensor_bytes(samples))
        with self._lock:
            old = self._cache.pop(name, None)
            if old is not None:
                self._cached_bytes -= old[3]
            self._cache[name] = entry
            self._cached_bytes += entry[3]
            while len(self._cache) > 1 and (len(self._cache) > self._cache_files
                                            or self._cached_bytes > self._cache_bytes):
                self._cached_bytes -= self._cache.popitem(last=False)[1][3]
        return entry

    def cached(self, name: str) -> bool:
        """Whether the file ``name`` is in the cache (its reads need no disk access)."""
        return name in self._cache

    def read_file_samples(self, name: str, indices: List[int]) -> List[Optional[Dict[str, Any]]]:
        """The samples at ``indices`` of file ``name``, one cache lookup for all of them (a batch's hot path):
        new dicts the caller may add keys to; None for an index beyond the file's samples. Raises
        ``CheckpointError`` like ``read``."""
        columns, samples, n, _ = self._file(name)
        if columns is not None:
            items = columns.items()
            return [{k: v[index] for k, v in items} if index < n else None for index in indices]
        return [dict(samples[index]) if index < n else None for index in indices]

    def read(self, data_id: str) -> Dict[str, Any]:
        """Return the sample; raises ``CheckpointError`` (missing / corrupt file) or ``ValueError`` (bad id)."""
        name, index = split_data_id(data_id)
        columns, samples, n, _ = self._file(name)
        if index >= n:
            raise ValueError(f"data_id '{data_id}': file holds only {n} samples")
        if columns is not None:
            return {k: v[index] for k, v in columns.items()}
        return samples[index]


def save_policy(path_policy: str, name: str, state_dict: Dict[str, Any], policy_iter: int) -> str:
    """Publish weights as ``{path_policy}/{name}.safetensors``; readers see the old or the new file, never half."""
    os.makedirs(path_policy, exist_ok=True)
    return save_checkpoint(os.path.join(path_policy, name), {'model': state_dict, 'policy_iter': policy_iter,
                                                             'last_iter': policy_iter})


def load_policy(path: str) -> Tuple[Dict[str, Any], int]:
    """Return ``(model_state_dict, policy_iter)``; raises ``CheckpointError`` naming the file when bad."""
    state = load_checkpoint(path)
    return state['model'], int(state.get('policy_iter', state.get('last_iter', 0)))


_counter = itertools.count()


def unique_stem(prefix: str) -> str:
    """A file stem unique within this process and across processes (pid + counter)."""
    return f'{prefix}_{os.getpid()}_{next(_counter)}'


__all__ = ['save_samples', 'SampleReader', 'split_data_id', 'save_policy', 'load_policy', 'unique_stem',
           'CheckpointError']
