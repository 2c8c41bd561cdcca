"""Transitions <-> ``replay.v1.Batch``: each field's items stacked into raw little-endian bytes with its encoding
metadata (name, dtype, shape of one item), decoded with ``torch.frombuffer``. Nothing is pickled.

Floating-point values travel as float32 (observations, rewards, continuous actions: packed f32), integers as
int64 (discrete actions), booleans as one byte; uint8 and int32 tensors keep their dtype (images, small ids).
"""

from __future__ import annotations

import math
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .v1 import replay_pb2

if sys.byteorder != 'little':  # torch.frombuffer reads native order; the wire format is little-endian
    raise ImportError('ding.interaction.replay needs a little-endian host')

DTYPES: dict[str, torch.dtype] = {
    'float32': torch.float32,
    'int64': torch.int64,
    'int32': torch.int32,
    'uint8': torch.uint8,
    'bool': torch.bool,
}
_WIRE_DTYPE = {torch.float64: 'float32', torch.float16: 'float32', torch.int16: 'int64', torch.int8: 'int64'}
_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]{0,63}$')
MAX_FIELDS = 64
MAX_ITEM_DIMS = 8
MAX_BATCH_ITEMS = 1 << 16


class EncodingError(ValueError):
    """A batch that does not match its encoding metadata (or the expected one); the message names the field."""


@dataclass(frozen=True)
class FieldSpec:
    """One field's encoding: ``dtype`` (a key of ``DTYPES``) and the ``shape`` of one item."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def item_bytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=DTYPES[self.dtype]).element_size()

    def describe(self) -> str:
        return f'{self.name}: {self.dtype}{list(self.shape)}'


Encoding = dict[str, FieldSpec]


def _as_tensor(key: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
    elif isinstance(value, np.ndarray):
        tensor = torch.from_numpy(np.ascontiguousarray(value))
    elif isinstance(value, (bool, np.bool_)):
        tensor = torch.tensor(bool(value))
    elif isinstance(value, (int, np.integer)):
        tensor = torch.tensor(int(value), dtype=torch.int64)
    elif isinstance(value, (float, np.floating)):
        tensor = torch.tensor(float(value), dtype=torch.float32)
    else:
        raise EncodingError(f"field '{key}': cannot encode a {type(value).__name__} (tensors and numbers only)")
    wire = _WIRE_DTYPE.get(tensor.dtype)
    if wire is not None:
        tensor = tensor.to(DTYPES[wire])
    if tensor.dtype not in DTYPES.values():
        raise EncodingError(f"field '{key}': dtype {tensor.dtype} cannot travel (one of {sorted(DTYPES)})")
    return tensor


def _stack(key: str, values: list[Any]) -> torch.Tensor:
    """``values`` stacked on a new leading dim in a dtype that travels."""
    first = values[0]
    if isinstance(first, torch.Tensor) and not first.requires_grad and first.device.type == 'cpu':
        # the common case (a buffer's stored tensors): one stack, checked by torch itself
        try:
            stacked = torch.stack(values)
        except (RuntimeError, TypeError):
            stacked = None  # mixed shapes, dtypes or types: the item-by-item path names the problem
        if stacked is not None and stacked.dtype in DTYPES.values():
            return stacked
    tensors = [_as_tensor(key, value) for value in values]
    shapes = {tuple(t.shape) for t in tensors}
    dtypes = {t.dtype for t in tensors}
    if len(shapes) > 1 or len(dtypes) > 1:
        raise EncodingError(f"field '{key}': items differ in shape or dtype ({shapes}, {dtypes})")
    return torch.stack(tensors)


def _dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, d in DTYPES.items() if d == dtype)


def encode_batch(items: Sequence[Mapping[str, Any]], skip: Sequence[str] = ()) -> replay_pb2.Batch:
    """Stack ``items`` (dicts of tensors / numbers with the same keys) field by field into a ``Batch``.

    Keys in ``skip`` and keys holding None are left out (bookkeeping such as ``replay_unique_id``).
    """
    if not items:
        raise EncodingError('cannot encode an empty batch')
    keys = [k for k, v in items[0].items() if k not in skip and v is not None]
    batch = replay_pb2.Batch(size=len(items))
    for key in keys:
        if not _NAME_RE.match(str(key)):
            raise EncodingError(f'field name {key!r} is not an identifier of at most 64 characters')
        try:
            values = [item[key] for item in items]
        except KeyError:
            raise EncodingError(f"field '{key}' is missing from some items of the batch") from None
        stacked = _stack(key, values)
        batch.fields.append(
            replay_pb2.Field(
                name=key,
                dtype=_dtype_name(stacked.dtype),
                shape=list(stacked.shape[1:]),
                data=stacked.numpy().tobytes(),
            )
        )
    return batch


def batch_encoding(batch: replay_pb2.Batch) -> Encoding:
    """The encoding metadata of ``batch``, each field checked (name, dtype, shape, byte length)."""
    if len(batch.fields) > MAX_FIELDS:
        raise EncodingError(f'a batch has at most {MAX_FIELDS} fields, got {len(batch.fields)}')
    if not 0 < batch.size <= MAX_BATCH_ITEMS:
        raise EncodingError(f'batch size must be in [1, {MAX_BATCH_ITEMS}], got {batch.size}')
    encoding: Encoding = {}
    for field in batch.fields:
        if not _NAME_RE.match(field.name):
            raise EncodingError(f'field name {field.name!r} is not an identifier of at most 64 characters')
        if field.name in encoding:
            raise EncodingError(f"field '{field.name}' appears twice")
        if field.dtype not in DTYPES:
            raise EncodingError(f"field '{field.name}': dtype {field.dtype!r} is not one of {sorted(DTYPES)}")
        if len(field.shape) > MAX_ITEM_DIMS or any(d < 0 or d > 1 << 24 for d in field.shape):
            raise EncodingError(f"field '{field.name}': bad item shape {list(field.shape)}")
        spec = FieldSpec(field.name, field.dtype, tuple(int(d) for d in field.shape))
        if len(field.data) != batch.size * spec.item_bytes:
            raise EncodingError(
                f"field '{field.name}': {len(field.data)} bytes, but {batch.size} items of {spec.describe()} "
                f'take {batch.size * spec.item_bytes}'
            )
        encoding[field.name] = spec
    return encoding


def check_encoding(actual: Encoding, expected: Encoding, where: str) -> None:
    """``EncodingError`` naming ``where`` unless ``actual`` has exactly the fields, dtypes and shapes of
    ``expected``."""
    if actual == expected:
        return
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    differ = [
        f'{actual[k].describe()} (expected {expected[k].describe()})'
        for k in actual
        if k in expected and actual[k] != expected[k]
    ]
    raise EncodingError(f'{where}: the batch does not match the encoding: missing {missing}, extra {extra}, {differ}')


def decode_batch(batch: replay_pb2.Batch, expected: Encoding | None = None) -> dict[str, torch.Tensor]:
    """Field name -> tensor of shape ``[size, *shape]``, read in place from the message's bytes (read-only
    memory: callers stack or copy before writing). Checked against its own metadata and ``expected``."""
    encoding = batch_encoding(batch)
    if expected is not None:
        check_encoding(encoding, expected, 'decode')
    out = {}
    with warnings.catch_warnings():
        # the bytes object is immutable: the tensors are only read (collate copies them into the train batch)
        warnings.simplefilter('ignore', UserWarning)
        for field in batch.fields:
            spec = encoding[field.name]
            dtype = DTYPES[spec.dtype]
            if len(field.data) == 0:
                flat = torch.empty(0, dtype=dtype)
            else:
                flat = torch.frombuffer(field.data, dtype=dtype)
            out[field.name] = flat.view(batch.size, *spec.shape)
    return out


def unstack(fields: Mapping[str, torch.Tensor], size: int) -> list[dict[str, Any]]:
    """Per-item dicts of views into the stacked ``fields``."""
    columns = {k: v.unbind(0) for k, v in fields.items()}
    return [{k: col[i] for k, col in columns.items()} for i in range(size)]


def encoding_message(encoding: Encoding) -> replay_pb2.Batch:
    """``encoding`` as a ``Batch`` without data (the Status answer)."""
    return replay_pb2.Batch(
        size=0,
        fields=[replay_pb2.Field(name=s.name, dtype=s.dtype, shape=list(s.shape)) for s in encoding.values()],
    )


__all__ = [
    'DTYPES',
    'EncodingError',
    'FieldSpec',
    'Encoding',
    'encode_batch',
    'batch_encoding',
    'check_encoding',
    'decode_batch',
    'unstack',
    'encoding_message',
]
