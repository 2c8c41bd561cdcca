"""FIFO ring buffer with uniform sampling (``naive``, alias ``deque``)."""

from __future__ import annotations

import copy
import threading
from typing import Any

import numpy as np

from ding.utils.registry import BUFFER_REGISTRY

from .base_buffer import IBuffer


def _as_list(data: list[dict] | dict, buffer_name: str) -> list[dict]:
    items = [data] if isinstance(data, dict) else data
    if not isinstance(items, (list, tuple)):
        raise TypeError(f'{buffer_name}.push: expected a dict or a list of dicts, got {type(data).__name__}')
    for item in items:
        if not isinstance(item, dict):
            raise TypeError(f'{buffer_name}.push: every pushed item must be a dict, got {type(item).__name__}')
    return list(items)


class _RingBuffer(IBuffer):
    """Slot bookkeeping shared by the naive and the prioritized buffer.

    Items live in a list of ``replay_buffer_size`` slots written round-robin at ``_tail``; a slot
    holding None is empty. Stored dicts are shallow copies of what was pushed, tagged with
    ``replay_unique_id`` (``'{instance_name}_{n}'``, never reused) and ``replay_buffer_idx`` (slot).
    """

    def __init__(
        self,
        cfg: dict | None = None,
        tb_logger: Any | None = None,
        exp_name: str = 'default_experiment',
        instance_name: str = 'buffer',
    ) -> None:
        super().__init__(cfg, tb_logger, exp_name, instance_name)
        size = self._cfg.replay_buffer_size
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f'{type(self).__name__}: replay_buffer_size must be a positive int, got {size!r}')
        self._replay_buffer_size = size
        self._deepcopy = bool(self._cfg.get('deepcopy', False))
        self._lock = threading.Lock()
        self._data: list[dict | None] = [None] * size
        self._occupied = np.zeros(size, dtype=bool)
        self._tail = 0
        self._valid_count = 0
        self._push_count = 0
        self._next_unique_id = 0

    def _store(self, items: list[dict]) -> np.ndarray:
        """Write ``items`` at the tail (oldest slots are overwritten); return the slots used."""
        size = self._replay_buffer_size
        n = len(items)
        self._push_count += n
        if n > size:  # only the newest ``size`` survive; their predecessors still consumed ids
            self._next_unique_id += n - size
            items = items[n - size :]
            n = size
        slots = (self._tail + np.arange(n)) % size
        data, name, uid = self._data, self._instance_name, self._next_unique_id
        deep = self._deepcopy
        added = 0
        for k, item in enumerate(items):
            slot = int(slots[k])
            stored = copy.deepcopy(item) if deep else dict(item)
            stored['replay_unique_id'] = f'{name}_{uid + k}'
            stored['replay_buffer_idx'] = slot
            if data[slot] is None:
                added += 1
            data[slot] = stored
        self._next_unique_id = uid + n
        self._occupied[slots] = True
        self._valid_count += added
        self._tail = (self._tail + n) % size
        return slots

    def _logical_slots(self, sample_range: slice | None) -> np.ndarray:
        """Occupied slots from oldest to newest, optionally narrowed by ``sample_range``."""
        size = self._replay_buffer_size
        order = (self._tail + np.arange(size)) % size  # slots after the tail are the oldest (or empty)
        if self._valid_count != size:
            order = order[self._occupied[order]]
        return order if sample_range is None else order[sample_range]

    def _copy_out(self, slots: np.ndarray) -> list[dict]:
        """The learner gets shallow copies: keys it adds never reach the stored dicts."""
        data = self._data
        if self._deepcopy:
            return [copy.deepcopy(data[s]) for s in slots.tolist()]
        return [dict(data[s]) for s in slots.tolist()]

    def count(self) -> int:
        return self._valid_count

    def stored_data(self) -> list[dict]:
        """The samples held now, oldest slot first (the stored dicts themselves; no copies, no tensors)."""
        with self._lock:
            return [d for d in self._data if d is not None]

    def _ring_state(self) -> dict[str, Any]:
        return {
            'data': list(self._data),
            'tail': self._tail,
            'valid_count': self._valid_count,
            'push_count': self._push_count,
            'next_unique_id': self._next_unique_id,
            'replay_buffer_size': self._replay_buffer_size,
        }

    def _load_ring_state(self, state: dict[str, Any]) -> None:
        for key in ('data', 'tail', 'valid_count', 'push_count', 'next_unique_id'):
            if key not in state:
                raise KeyError(f"{type(self).__name__}.load_state_dict: missing key '{key}'")
        if len(state['data']) != self._replay_buffer_size:
            raise ValueError(
                f'{type(self).__name__}.load_state_dict: state holds {len(state["data"])} slots but '
                f'replay_buffer_size is {self._replay_buffer_size}'
            )
        self._data = list(state['data'])
        self._occupied = np.array([d is not None for d in self._data], dtype=bool)
        self._tail = int(state['tail'])
        self._valid_count = int(state['valid_count'])
        self._push_count = int(state['push_count'])
        self._next_unique_id = int(state['next_unique_id'])


@BUFFER_REGISTRY.register('naive')
class NaiveReplayBuffer(_RingBuffer):
    """First-in-first-out ring of ``replay_buffer_size`` items sampled uniformly.

    ``update`` is accepted and ignored (no priorities); ``cur_learner_iter`` is accepted for
    interface compatibility.
    """

    config = dict(
        type='naive',
        replay_buffer_size=10000,
        deepcopy=False,
        # DI-engine key; used-data tracking (for file-backed data) is not needed here and is ignored.
        enable_track_used_data=False,
        periodic_thruput_seconds=60,
    )

    def push(self, data: list[dict] | dict, cur_collector_envstep: int = -1) -> None:
        items = _as_list(data, type(self).__name__)
        if not items:
            return
        with self._lock:
            self._store(items)
        self._count_thruput('push', len(items))

    def sample(
        self, size: int, cur_learner_iter: int = -1, sample_range: slice | None = None, replace: bool = False
    ) -> list[dict] | None:
        """``size`` items drawn uniformly (without replacement unless ``replace``), or None if too few.

        ``sample_range`` slices the items ordered oldest-to-newest, e.g. ``slice(-100, None)`` draws
        from the 100 newest.
        """
        if size <= 0:
            raise ValueError(f'{type(self).__name__}.sample: size must be positive, got {size}')
        with self._lock:
            n_valid = self._valid_count
            if sample_range is None and (n_valid == self._replay_buffer_size or n_valid == self._tail):
                # No holes in a FIFO ring: a full ring uses every slot, a partly filled one slots [0, n).
                candidates = None
                n = self._valid_count
            else:
                candidates = self._logical_slots(sample_range)
                n = len(candidates)
            if n == 0 or (not replace and n < size):
                return None
            if replace:
                pick = np.random.randint(0, n, size=size)
            elif size * 4 < n:
                # Small batch from a big pool: draw with replacement and redraw duplicates, far cheaper than
                # the full permutation np.random.choice(replace=False) builds.
                pick = np.random.randint(0, n, size=size)
                while True:
                    uniq = np.unique(pick)
                    if len(uniq) == size:
                        break
                    pick = np.concatenate([uniq, np.random.randint(0, n, size=size - len(uniq))])
                np.random.shuffle(pick)
            else:
                pick = np.random.choice(n, size=size, replace=False)
            slots = pick if candidates is None else candidates[pick]
            out = self._copy_out(slots)
        self._count_thruput('sample', size)
        return out

    def update(self, info: dict[str, list[Any]]) -> None:
        """No priorities in a FIFO buffer: nothing to update."""
        return None

    def clear(self) -> None:
        with self._lock:
            self._data = [None] * self._replay_buffer_size
            self._occupied[:] = False
            self._tail = 0
            self._valid_count = 0

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return self._ring_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._load_ring_state(state)


# DI-engine configs name the plain FIFO buffer 'deque'.
BUFFER_REGISTRY.register('deque', NaiveReplayBuffer)
