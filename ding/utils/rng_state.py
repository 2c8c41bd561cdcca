"""Random number generator states of python, numpy and torch, as values a checkpoint stores losslessly."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def get_rng_state() -> dict:
    """States of python ``random``, numpy's global generator, torch CPU (and every CUDA device when
    available), as tensors and plain values that :func:`save_checkpoint` stores losslessly."""
    version, internal, gauss_next = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state = {
        'python': {'version': version, 'state': torch.tensor(internal, dtype=torch.int64), 'gauss_next': gauss_next},
        'numpy': {
            'bit_generator': np_state['bit_generator'],
            'key': torch.from_numpy(np_state['state']['key'].astype(np.int64)),
            'pos': int(np_state['state']['pos']),
            'has_gauss': int(np_state['has_gauss']),
            'gauss': float(np_state['gauss']),
        },
        'torch': torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def _to_host(t: Any) -> torch.Tensor:
    return t.cpu() if isinstance(t, torch.Tensor) else torch.as_tensor(t)


def set_rng_state(state: dict) -> None:
    """Restore what :func:`get_rng_state` returned (possibly after a save/load round trip)."""
    if 'python' in state:
        py = state['python']
        internal = tuple(int(x) for x in _to_host(py['state']).tolist())
        random.setstate((int(py['version']), internal, py['gauss_next']))
    if 'numpy' in state:
        n = state['numpy']
        key = _to_host(n['key']).numpy().astype(np.uint32)
        np.random.set_state((n['bit_generator'], key, int(n['pos']), int(n['has_gauss']), float(n['gauss'])))
    if 'torch' in state:
        torch.set_rng_state(_to_host(state['torch']).to(torch.uint8))
    if state.get('cuda') and torch.cuda.is_available():
        cuda_states = [_to_host(s).to(torch.uint8) for s in state['cuda']]
        # A different GPU count than at save time: restore the devices both runs have.
        for i, s in enumerate(cuda_states[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s, i)


__all__ = ['get_rng_state', 'set_rng_state']
