"""Trajectories and policy weights passed between parallel workers through a shared directory (reading sample
files back: ``SampleReader``, in ``ding.utils.sample_reader``).

Sample files are checkpoints (safetensors + manifest, see ``ding.utils.checkpoint``): written atomically,
sha256-verified on read, never unpickled. A sample is referenced by a ``data_id`` of the form
``'<file name>#<index>'`` relative to ``path_data``.

A policy file is ONE safetensors file whose header metadata carries its own sha256 (``ding_sha256``: the
digest of the whole file with that field's value zeroed), so publishing it is a single rename and a reader
(or a learner resuming from it) finds the old or the new weights, each verifiable alone, never a mismatched
pair. ``load_policy`` still reads the older data + manifest pair.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
from typing import Any

import torch

from .atomic_file import remove_quietly, write_temp
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .file_names import SUFFIX, manifest_path, split_data_id
from .sample_reader import SampleReader
from .state_dict_codec import (
    CodecError,
    WeightsError,
    decode_tensors,
    encode_tensors,
    flatten_state_dict,
    prepare_tensor,
    read_metadata,
    unflatten_state_dict,
)

POLICY_FILE_PREFIX = 'policy_'
POLICY_FORMAT = 'ding-policy-1'
DIGEST_KEY = 'ding_sha256'
_BLANK_DIGEST = b'0' * 64


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


def _digest_span(data: bytes | bytearray, digest: bytes) -> int:
    """Offset of the digest value inside the header's ``"ding_sha256":"<digest>"`` field (found exactly once)."""
    (length,) = struct.unpack('<Q', bytes(data[:8]))
    field = b'"' + DIGEST_KEY.encode() + b'":"' + digest + b'"'
    start = data.find(field, 8, 8 + length)
    if start < 0 or data.find(field, start + 1, 8 + length) >= 0:
        raise ValueError(f'the header holds no single {DIGEST_KEY!r} field')
    return start + len(field) - len(digest) - 1


def encode_policy(state_dict: dict[str, Any], policy_iter: int) -> bytes:
    """The bytes of a policy file: the weights (flat, ``'fc.weight'`` / nested ``'a/b'``) and a header whose
    metadata holds ``format``, ``policy_iter`` and the file's own sha256."""
    storages: set[tuple[Any, int]] = set()
    tensors = {name: prepare_tensor(t, storages, to_cpu=True) for name, t in flatten_state_dict(state_dict).items()}
    meta = {'format': POLICY_FORMAT, 'policy_iter': str(int(policy_iter)), DIGEST_KEY: _BLANK_DIGEST.decode()}
    data = bytearray(encode_tensors(tensors, meta))
    at = _digest_span(data, _BLANK_DIGEST)
    data[at : at + 64] = hashlib.sha256(data).hexdigest().encode()
    return bytes(data)


def decode_policy(data: bytes, path: str) -> tuple[dict[str, Any], int]:
    """``(state_dict, policy_iter)`` of policy-file bytes after checking their sha256; ``CheckpointError``
    naming ``path`` when they are truncated, corrupt or not a policy file."""
    try:
        meta = read_metadata(data)
        digest = meta[DIGEST_KEY].encode('ascii')
        at = _digest_span(data, digest)
    except (struct.error, ValueError, KeyError, UnicodeError, RecursionError) as exc:
        raise CheckpointError(f'policy file {path}: unreadable header (truncated or corrupt?): {exc!r}') from None
    blanked = b''.join((data[:at], _BLANK_DIGEST, data[at + 64 :]))
    if hashlib.sha256(blanked).hexdigest().encode() != digest:
        raise CheckpointError(f'policy file {path}: sha256 mismatch: the file is truncated or corrupt')
    try:
        flat, _ = decode_tensors(data)
        return unflatten_state_dict(flat), int(meta.get('policy_iter', '0'))
    except (CodecError, WeightsError, ValueError) as exc:  # the digest matched: only a foreign writer gets here
        raise CheckpointError(f'policy file {path}: cannot decode: {exc}') from None


def is_policy_file(data: bytes) -> bool:
    """Whether ``data`` is a self-verifying policy file (rather than the data half of a checkpoint)."""
    try:
        return read_metadata(data).get('format') == POLICY_FORMAT
    except (struct.error, ValueError, UnicodeError, RecursionError):
        return False


def save_policy(path_policy: str, name: str, state_dict: dict[str, Any], policy_iter: int) -> str:
    """Publish weights as ``{path_policy}/{name}.safetensors`` with one rename: readers (and a learner resuming
    after a kill) see the old or the new file, each complete. Not fsynced: the file is replaced every fraction
    of a second, and one torn by a machine crash fails its sha256 (the learner then resumes from its checkpoint).
    Returns the file's path; raises ``OSError`` when it cannot be written (the old file stays)."""
    os.makedirs(path_policy, exist_ok=True)
    final = os.path.join(path_policy, name + SUFFIX)
    tmp = write_temp(final, encode_policy(state_dict, policy_iter), durable=False)
    try:
        os.replace(tmp, final)
    except BaseException:
        remove_quietly(tmp)
        raise
    # A manifest left by the older two-file format would describe other bytes; the header now speaks alone.
    remove_quietly(manifest_path(final))
    return final


def load_policy(path: str) -> tuple[dict[str, Any], int]:
    """Return ``(model_state_dict, policy_iter)``; raises ``CheckpointError`` naming the file when it is missing
    or bad. Reads the one-file format of ``save_policy`` and the older data + manifest pair."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError as exc:
        raise CheckpointError(f'policy file {path}: cannot read: {exc.strerror or exc}') from None
    if is_policy_file(data) or not os.path.exists(manifest_path(path)):  # without a manifest: say what is wrong
        return decode_policy(data, path)
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
    'encode_policy',
    'decode_policy',
    'is_policy_file',
    'POLICY_FORMAT',
    'unique_stem',
    'CheckpointError',
]
