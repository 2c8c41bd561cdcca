"""Batch a list of samples into tensors (``default_collate``) and move nested data between devices."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch


def default_collate(batch: list[Any], keys: Iterable[str] | None = None) -> Any:
    """Stack a list of samples into one batch.

    - tensors -> ``torch.stack`` (new leading batch dim); numpy arrays / numpy scalars -> one ``np.stack`` then a
      tensor; bools -> bool tensor, ints -> int64 tensor, floats -> float32 tensor;
    - dicts -> dict of collated values (recursively); namedtuples -> the same namedtuple of collated fields;
      lists / tuples of equal length -> list of collated positions;
    - anything else (strings, None, dicts with differing keys, mixed types...) -> the plain list.

    ``keys``: for a list of dicts, collate only these keys (skips bookkeeping fields on hot paths).
    """
    if not isinstance(batch, (list, tuple)):
        raise TypeError(f'default_collate: expected a list of samples, got {type(batch).__name__}')
    if len(batch) == 0:
        raise ValueError('default_collate: empty batch')
    if keys is not None:
        if not isinstance(batch[0], Mapping):
            raise TypeError(f'default_collate(keys=...): samples must be dicts, got {type(batch[0]).__name__}')
        return {k: _collate_field(batch, k) for k in keys}
    return _collate(batch, '')


def _collate_field(batch: list[Mapping], key: str) -> Any:
    try:
        values = [sample[key] for sample in batch]
    except KeyError:
        missing = sum(1 for s in batch if key not in s)
        raise KeyError(f"default_collate: key '{key}' is missing from {missing} of {len(batch)} samples") from None
    return _collate(values, key)


def _collate(batch: list[Any], path: str) -> Any:
    elem = batch[0]
    if isinstance(elem, torch.Tensor):
        try:
            return torch.stack(batch)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"default_collate: cannot stack field '{path}': {e}") from None
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in 'biuf':
            try:
                return torch.from_numpy(np.stack(batch))
            except (ValueError, TypeError) as e:
                raise ValueError(f"default_collate: cannot stack field '{path}': {e}") from None
        return list(batch)
    if isinstance(elem, np.generic) and elem.dtype.kind in 'biuf':
        return torch.from_numpy(np.asarray(batch))
    if isinstance(elem, (bool, Integral, Real)):
        # Python numbers: one numpy conversion is several times faster than torch.tensor(list).
        kind = _number_kind(batch)
        if kind is not None:
            return torch.from_numpy(np.array(batch, dtype=kind))
        return list(batch)
    if isinstance(elem, Mapping):
        keys = elem.keys()
        if all(isinstance(b, Mapping) and b.keys() == keys for b in batch):
            return {k: _collate([b[k] for b in batch], f'{path}.{k}' if path else str(k)) for k in keys}
        return list(batch)
    if isinstance(elem, tuple) and hasattr(elem, '_fields'):  # namedtuple
        if all(type(b) is type(elem) for b in batch):
            return type(elem)(*(_collate(list(s), f'{path}.{f}') for f, s in zip(elem._fields, zip(*batch))))
        return list(batch)
    if isinstance(elem, Sequence) and not isinstance(elem, (str, bytes)):
        n = len(elem)
        if n > 0 and all(isinstance(b, Sequence) and not isinstance(b, (str, bytes)) and len(b) == n for b in batch):
            return [_collate(list(s), f'{path}[{i}]') for i, s in enumerate(zip(*batch))]
        return list(batch)
    return list(batch)


def _number_kind(batch: list[Any]) -> type | None:
    """numpy dtype for a list of Python numbers: bool if all bools, int64 if all ints, float32 if all real."""
    elem = batch[0]
    if isinstance(elem, bool):
        return np.bool_ if all(isinstance(b, bool) for b in batch) else None
    if isinstance(elem, Integral):
        if all(isinstance(b, Integral) and not isinstance(b, bool) for b in batch):
            return np.int64
    if all(isinstance(b, Real) and not isinstance(b, bool) for b in batch):
        return np.float32
    return None


def to_device(data: Any, device: Any, ignore_keys: Iterable[str] = ()) -> Any:
    """Move every tensor in a nested dict / list / tuple to ``device``; other values are returned as they are."""
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, Mapping):
        ignore = set(ignore_keys)
        return {k: (v if k in ignore else to_device(v, device)) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, '_fields'):
        return type(data)(*(to_device(v, device) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(to_device(v, device) for v in data)
    return data


def default_decollate(batch: Any) -> list[Any]:
    """The inverse of ``default_collate`` for dicts / tensors: split along dim 0 into a list of samples."""
    if isinstance(batch, torch.Tensor):
        return list(batch.unbind(0))
    if isinstance(batch, Mapping):
        parts = {k: default_decollate(v) for k, v in batch.items()}
        n = len(next(iter(parts.values())))
        return [{k: v[i] for k, v in parts.items()} for i in range(n)]
    if isinstance(batch, (list, tuple)):
        return list(batch)
    raise TypeError(f'default_decollate: cannot split a {type(batch).__name__}')
