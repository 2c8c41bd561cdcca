"""The state tree of a checkpoint: a nested state split into named tensors and a JSON skeleton, and back.

The JSON skeleton mirrors the state. Plain JSON scalars and arrays stand for themselves; every JSON
object is a one-key tagged node, so no user value can be mistaken for structure:

* ``{"$tensor": name}`` ``{"$ndarray": name}`` ``{"$bytes": name}``: a tensor stored in the file under ``name``
* ``{"$dict": {str: node}}``: a dict whose keys are all str (order kept)
* ``{"$items": [[key, node], ...]}``: a dict with other keys (int, float, bool, None, tuple)
* ``{"$tuple": [node, ...]}``: a tuple (torch optimizers keep betas as a tuple)
* ``{"$float": "nan"|"inf"|"-inf"}``: a non-finite float (plain JSON has no spelling for them)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .state_dict_codec import prepare_tensor, storable_dtype


class CheckpointError(Exception):
    """A checkpoint cannot be used (missing, incomplete, corrupt, refused). The message names the file."""


def _path_str(path: tuple) -> str:
    return '/'.join(str(k) for k in path) if path else '<root>'


class StateFlattener:
    """Walks a state once: ``value(state, ())`` returns its skeleton and fills ``tensors``."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._aliases: dict[tuple, str] = {}
        self._storages: set[tuple[Any, int]] = set()
        # Tensors made on the fly (numpy/bytes wrappers, state_dict() results) must outlive the walk, or
        # their freed memory could be reused by a later tensor and wrongly match the alias lookup.
        self._alive: list[Any] = []

    def _unique_name(self, path: tuple) -> str:
        base = _path_str(path)
        name, i = base, 1
        # '__metadata__' is the header's own key in safetensors; '/' inside keys can make two paths
        # collide. The skeleton keeps the true structure, so renaming is harmless.
        while name in self.tensors or name == '__metadata__':
            name = f'{base}#{i}'
            i += 1
        return name

    def add_tensor(self, t: torch.Tensor, path: tuple) -> str:
        if t.layout != torch.strided:
            raise TypeError(
                f"checkpoint: sparse/non-strided tensor at key '{_path_str(path)}' is not supported; "
                'call .to_dense() first'
            )
        if not storable_dtype(t.dtype):
            raise TypeError(
                f"checkpoint: tensor dtype {t.dtype} at key '{_path_str(path)}' cannot be stored in safetensors"
            )
        if t.numel() == 0:
            # Its own (empty) storage: never 'shared', nothing to alias.
            name = self._unique_name(path)
            self.tensors[name] = torch.empty(t.shape, dtype=t.dtype, device=t.device)
            return name
        # Tied weights show up as distinct objects viewing the same memory (state_dict() detaches each
        # parameter anew): store them once and let the skeleton reference the name twice, like torch.save.
        alias = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        known = self._aliases.get(alias)
        if known is not None:
            return known
        self._alive.append(t)
        t = prepare_tensor(t, self._storages)
        name = self._unique_name(path)
        self.tensors[name] = t
        self._aliases[alias] = name
        return name

    def key(self, k: Any, path: tuple) -> Any:
        if k is None or isinstance(k, (bool, int, str)):
            return k
        if isinstance(k, float):
            return self.value(k, path)
        if isinstance(k, tuple):
            return {'$tuple': [self.key(x, path) for x in k]}
        raise TypeError(f"checkpoint: unsupported dict key type {type(k).__name__} under key '{_path_str(path)}'")

    def value(self, v: Any, path: tuple) -> Any:
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {'$float': repr(v)}
        if isinstance(v, torch.Tensor):
            return {'$tensor': self.add_tensor(v, path)}
        if isinstance(v, dict):
            if all(type(k) is str for k in v):
                return {'$dict': {k: self.value(x, path + (k,)) for k, x in v.items()}}
            return {'$items': [[self.key(k, path), self.value(x, path + (k,))] for k, x in v.items()]}
        if isinstance(v, list):
            return [self.value(x, path + (i,)) for i, x in enumerate(v)]
        if isinstance(v, tuple):
            return {'$tuple': [self.value(x, path + (i,)) for i, x in enumerate(v)]}
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                raise TypeError(f"checkpoint: numpy object array at key '{_path_str(path)}' is not supported")
            try:
                t = torch.from_numpy(np.ascontiguousarray(v))
            except TypeError as e:
                raise TypeError(f"checkpoint: numpy dtype {v.dtype} at key '{_path_str(path)}' is not supported") from e
            return {'$ndarray': self.add_tensor(t, path)}
        if isinstance(v, np.generic) and not isinstance(v, (np.str_, np.bytes_, np.void, np.object_)):
            return self.value(v.item(), path)  # numpy scalars come back as python numbers
        if isinstance(v, (bytes, bytearray)):
            return {'$bytes': self.add_tensor(torch.frombuffer(bytearray(v), dtype=torch.uint8), path)}
        state_dict = getattr(v, 'state_dict', None)
        if callable(state_dict):
            return self.value(state_dict(), path)
        raise TypeError(
            f"checkpoint: cannot store value of type {type(v).__qualname__} at key '{_path_str(path)}' (tensors, numbers, str, bool, None, "
            'dict/list/tuple, numpy arrays, bytes and objects with state_dict() are supported)'
        )


class StateUnflattener:
    """Rebuilds a state from its skeleton (``node(skeleton)``) and the tensors read from the file."""

    def __init__(self, tensors: dict[str, torch.Tensor], map_location: Any, file: str) -> None:
        self.tensors = tensors
        self.map_location = map_location
        self.file = file
        self._moved: dict[str, torch.Tensor] = {}

    def _stored(self, name: str) -> torch.Tensor:
        try:
            return self.tensors[name]
        except (KeyError, TypeError):
            msg = f'checkpoint {self.file}: metadata refers to missing tensor {name!r}'
            raise CheckpointError(msg) from None

    def _tensor(self, name: str) -> torch.Tensor:
        t = self._moved.get(name)
        if t is None:
            t = self._stored(name)
            if self.map_location is not None:
                t = t.to(self.map_location)
            self._moved[name] = t  # one object per stored name keeps tied tensors tied
        return t

    def node(self, n: Any) -> Any:
        if isinstance(n, list):
            return [self.node(x) for x in n]
        if not isinstance(n, dict):
            return n
        if len(n) != 1:
            raise CheckpointError(f'checkpoint {self.file}: malformed metadata node {n!r:.80}')
        ((tag, body),) = n.items()
        if tag == '$dict':
            return {k: self.node(x) for k, x in body.items()}
        if tag == '$items':
            return {self.node(k): self.node(x) for k, x in body}
        if tag == '$tuple':
            return tuple(self.node(x) for x in body)
        if tag == '$tensor':
            return self._tensor(body)
        if tag == '$ndarray':
            return self._stored(body).numpy()  # always host memory, whatever map_location says
        if tag == '$bytes':
            return self._stored(body).numpy().tobytes()
        if tag == '$float':
            return float(body)
        raise CheckpointError(f'checkpoint {self.file}: unknown metadata tag {tag!r}')


def as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_floating_point():
        return int(v.item())
    return None


__all__ = ['CheckpointError', 'StateFlattener', 'StateUnflattener', 'as_int']
