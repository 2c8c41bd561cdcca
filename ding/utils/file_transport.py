"""Trajectories and policy weights passed between parallel workers through a shared directory (reading sample
files back: ``SampleReader``, in ``ding.utils.sample_reader``).

Files are checkpoints (safetensors + manifest, see ``ding.utils.checkpoint``): written atomically,
sha256-verified on read, never unpickled. A sample is referenced by a ``data_id`` of the form
``'<file name>#<index>'`` relative to ``path_data``.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import torch

from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .file_names import split_data_id
from .sample_reader import SampleReader

POLICY_FILE_PREFIX = 'policy_'


def _to_columns(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Stack same-shaped tensors key by key: one tensor per key writes and reads far faster than many."""
    keys = samples[0].keys()
    if any(s.keys() != keys for s in samples):
        return None
    columns: dict[str, Any] = {}
    for key in keys:
        values = [s[key] for s in samples]
        first = values[0]
        if isinstance(first, torch.Tensor) and all(
            isinstance(v, torch.Tensor) and v.shape == first.shape and v.dtype == first.dtype for v in values
        ):
            columns[key] = torch.stack(values)
        else:
            columns[key] = values
    return columns


def save_samples(path_data: str, file_stem: str, samples: list[dict[str, Any]]) -> list[str]:
    """Write ``samples`` as one file named ``file_stem`` in ``path_data``; return one data_id per sample."""
    if not samples:
        return []
    os.makedirs(path_data, exist_ok=True)
    columns = _to_columns(samples)
    state = {'columns': columns} if columns is not None else {'samples': samples}
    # no fsync: a sample file is read within seconds or not at all, and a torn one fails verification
    final = save_checkpoint(os.path.join(path_data, file_stem), state, durable=False)
    name = os.path.basename(final)
    return [f'{name}#{i}' for i in range(len(samples))]


def save_policy(path_policy: str, name: str, state_dict: dict[str, Any], policy_iter: int) -> str:
    """Publish weights as ``{path_policy}/{name}.safetensors``; readers see the old or the new file, never half.
    Not fsynced: the file is replaced every fraction of a second, and the learner re-publishes after a restart."""
    os.makedirs(path_policy, exist_ok=True)
    return save_checkpoint(
        os.path.join(path_policy, name),
        {'model': state_dict, 'policy_iter': policy_iter, 'last_iter': policy_iter},
        durable=False,
    )


def load_policy(path: str) -> tuple[dict[str, Any], int]:
    """Return ``(model_state_dict, policy_iter)``; raises ``CheckpointError`` naming the file when bad."""
    state = load_checkpoint(path)
    return state['model'], int(state.get('policy_iter', state.get('last_iter', 0)))


_counter = itertools.count()


def unique_stem(prefix: str) -> str:
    """A file stem unique within this process and across processes (pid + counter)."""
    return f'{prefix}_{os.getpid()}_{next(_counter)}'


__all__ = [
    'save_samples',
    'SampleReader',
    'split_data_id',
    'save_policy',
    'load_policy',
    'unique_stem',
    'CheckpointError',
]
