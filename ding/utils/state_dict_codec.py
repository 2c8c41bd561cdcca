"""The one safetensors codec of ding: checkpoints, policy files and ``/weights/current`` all go through it.

Two layers:

* Bytes: ``encode_tensors(tensors, metadata)`` / ``decode_tensors(payload)`` turn a flat ``{name: tensor}``
  plus string metadata into safetensors bytes and back; ``prepare_tensor`` makes a tensor storable
  (detached, contiguous, on its own storage) and ``storable_dtype`` says whether safetensors has a dtype.
* Weights payload (``/weights/current``): nested state dicts (``{'model': {'fc.weight': t}}``) stored flat
  under ``'model/fc.weight'`` with metadata ``{'format': 'ding-weights-1', 'version': '<n>'}``
  (``serialize_weights`` / ``deserialize_weights``).

Checkpoint files (``ding.utils.checkpoint``) keep their own JSON skeleton in the metadata and use the bytes
layer. Nothing here unpickles.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
from collections.abc import Mapping
from typing import Any

import safetensors.torch as st
import torch

WEIGHTS_FORMAT = 'ding-weights-1'


class WeightsError(Exception):
    """Weights that cannot be served or used (malformed, corrupted, incompatible). The message says why."""


class CodecError(ValueError):
    """Bytes that are not a valid safetensors payload. The message says why."""


# ---- bytes ---------------------------------------------------------------------------------------------
@functools.cache
def storable_dtype(dtype: torch.dtype) -> bool:
    """Whether safetensors can store tensors of ``dtype`` (asked of safetensors itself, once per dtype)."""
    try:
        st.save({'probe': torch.empty(0, dtype=dtype)})
    except Exception:  # the refusal's exception class differs across safetensors versions
        return False
    return True


def prepare_tensor(tensor: torch.Tensor, storages: set[tuple[Any, int]], to_cpu: bool = False) -> torch.Tensor:
    """``tensor`` detached and contiguous (on the host when ``to_cpu``), copied when its storage is already in
    ``storages`` (safetensors refuses two tensors on one storage: tied weights, views of one buffer)."""
    tensor = tensor.detach()
    if to_cpu and tensor.device.type != 'cpu':
        tensor = tensor.cpu()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if tensor.numel():
        storage = (tensor.device, tensor.untyped_storage().data_ptr())
        if storage in storages:
            tensor = tensor.clone()
        else:
            storages.add(storage)
    return tensor


def encode_tensors(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """safetensors bytes of ``tensors`` with header ``metadata`` (tensors prepared by ``prepare_tensor``)."""
    return st.save(dict(tensors), metadata=dict(metadata))


def decode_tensors(payload: bytes) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` of safetensors bytes on the host; ``CodecError`` when they are not valid."""
    try:
        tensors = st.load(bytes(payload))
        metadata = read_metadata(payload)
    except Exception as exc:  # the parser's error classes differ across safetensors versions
        raise CodecError(f'{type(exc).__name__}: {exc}') from None
    return tensors, metadata


def read_metadata(payload: bytes) -> dict[str, str]:
    """The header metadata of safetensors bytes (empty when there is none); raises on a malformed header.

    safetensors' Python API returns metadata only for files (``safe_open``), not for bytes, so the header is
    read here as its format specification lays it out: a little-endian u64 length, then a JSON object whose
    ``'__metadata__'`` entry is the metadata. Only reading; writing is left to safetensors."""
    (length,) = struct.unpack('<Q', payload[:8])
    header = json.loads(bytes(payload[8 : 8 + length]).decode('utf-8'))
    if not isinstance(header, dict):
        raise ValueError('safetensors header is not a JSON object')
    return dict(header.get('__metadata__') or {})


def sha256_hex(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


# ---- weights payload -----------------------------------------------------------------------------------
def flatten_state_dict(state: Mapping[str, Any], prefix: str = '') -> dict[str, torch.Tensor]:
    """``{'model': {'fc.weight': t}}`` -> ``{'model/fc.weight': t}``; every leaf must be a tensor."""
    flat: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if not isinstance(key, str) or not key or '/' in key:
            raise WeightsError(
                f"weights: key {key!r} under '{prefix or '<root>'}' must be a non-empty string without '/'"
            )
        name = prefix + key
        if isinstance(value, torch.Tensor):
            flat[name] = value
        elif isinstance(value, Mapping):
            flat.update(flatten_state_dict(value, name + '/'))
        else:
            raise WeightsError(
                f"weights: value at '{name}' is a {type(value).__name__}; only tensors "
                f'(in nested dicts) can be published'
            )
    return flat


def unflatten_state_dict(flat: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The inverse of ``flatten_state_dict``."""
    out: dict[str, Any] = {}
    for name, tensor in flat.items():
        node = out
        *parents, leaf = name.split('/')
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise WeightsError(f"weights: '{name}' collides with a tensor of the same path")
            node = child
        node[leaf] = tensor
    return out


def serialize_weights(state_dict: Mapping[str, Any], version: int) -> bytes:
    """safetensors bytes of ``state_dict`` (a copy: later updates of the tensors do not show)."""
    storages: set[tuple[Any, int]] = set()
    tensors = {name: prepare_tensor(t, storages, to_cpu=True) for name, t in flatten_state_dict(state_dict).items()}
    return encode_tensors(tensors, {'format': WEIGHTS_FORMAT, 'version': str(int(version))})


def deserialize_weights(payload: bytes) -> tuple[dict[str, Any], dict[str, str]]:
    """``(state_dict, metadata)`` from safetensors bytes; ``WeightsError`` when they are not valid."""
    try:
        flat, meta = decode_tensors(payload)
    except CodecError as exc:
        raise WeightsError(f'weights: payload is not a valid safetensors file: {exc}') from None
    if meta.get('format') != WEIGHTS_FORMAT:
        raise WeightsError(f'weights: payload format is {meta.get("format")!r}, expected {WEIGHTS_FORMAT!r}')
    return unflatten_state_dict(flat), meta


__all__ = [
    'WEIGHTS_FORMAT',
    'WeightsError',
    'CodecError',
    'storable_dtype',
    'prepare_tensor',
    'encode_tensors',
    'decode_tensors',
    'read_metadata',
    'sha256_hex',
    'flatten_state_dict',
    'unflatten_state_dict',
    'serialize_weights',
    'deserialize_weights',
]
