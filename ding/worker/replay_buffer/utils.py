"""Helpers shared by the replay buffers: numpy segment trees, a push/sample rate limiter, config merging."""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from easydict import EasyDict


def deep_merge_dicts(base: dict, update: dict | None) -> EasyDict:
    """Return ``base`` with ``update`` merged in recursively (neither input is modified)."""
    merged = copy.deepcopy(dict(base))
    for k, v in (update or {}).items():
        if isinstance(v, dict) and isinstance(merged.get(k), dict):
            merged[k] = deep_merge_dicts(merged[k], v)
        else:
            merged[k] = copy.deepcopy(v)
    return EasyDict(merged)


class SegmentTree:
    """A binary tree over ``capacity`` leaves keeping ``operation`` of every subtree.

    Stored as a flat numpy array of ``2 * capacity`` values (node ``i`` has children ``2i`` and
    ``2i+1``; the root is node 1; leaves start at ``capacity``), with ``capacity`` rounded up to a
    power of two so that every leaf sits at the same depth and updates can be vectorised level by level.
    """

    def __init__(
        self, capacity: int, operation: Callable[[np.ndarray, np.ndarray], np.ndarray], neutral_element: float
    ) -> None:
        if capacity <= 0:
            raise ValueError(f'SegmentTree: capacity must be positive, got {capacity}')
        self.size = int(capacity)
        self.capacity = 1 << max(0, (self.size - 1).bit_length())
        self.operation = operation
        self.neutral_element = float(neutral_element)
        self.value = np.full(2 * self.capacity, self.neutral_element, dtype=np.float64)
        self._py_op = max if operation is np.maximum else (min if operation is np.minimum else (lambda a, b: a + b))

    def __setitem__(self, idx: int | np.ndarray, val: float | np.ndarray) -> None:
        if np.ndim(idx) == 0:
            self._set_one(int(idx), float(val))
            return
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self.size:
            raise IndexError(f'SegmentTree: index out of range [0, {self.size})')
        value, op = self.value, self.operation
        value[idx + self.capacity] = val
        # All leaves sit at the same depth, so the touched parents move up one level together.
        # Narrow levels (few nodes per update) are cheaper to recompute whole with strided slices.
        node = np.unique((idx + self.capacity) >> 1)
        width, dense_below = self.capacity >> 1, 4 * len(node)
        while width > 0:
            if width <= dense_below:
                value[width : 2 * width] = op(value[2 * width : 4 * width : 2], value[2 * width + 1 : 4 * width : 2])
            else:
                left = node << 1
                value[node] = op(value[left], value[left + 1])  # duplicate parents just repeat a write
                node >>= 1
            width >>= 1

    def _set_one(self, idx: int, val: float) -> None:
        if not 0 <= idx < self.size:
            raise IndexError(f'SegmentTree: index {idx} out of range [0, {self.size})')
        # A scalar update is faster as plain Python than as a dozen tiny numpy calls.
        value, op = self.value, self._py_op
        node = idx + self.capacity
        value[node] = val
        node >>= 1
        while node >= 1:
            value[node] = op(float(value[2 * node]), float(value[2 * node + 1]))
            node >>= 1

    def __getitem__(self, idx: int | np.ndarray) -> float | np.ndarray:
        return self.value[np.asarray(idx) + self.capacity]

    def reduce(self, start: int = 0, end: int | None = None) -> float:
        """``operation`` over leaves ``[start, end)``; the whole tree is the root, O(1)."""
        end = self.size if end is None else end
        if start == 0 and end >= self.size:
            return float(self.value[1])
        if not 0 <= start < end <= self.size:
            raise IndexError(f'SegmentTree.reduce: bad range [{start}, {end}) for size {self.size}')
        result = self.neutral_element
        lo, hi = start + self.capacity, end + self.capacity
        while lo < hi:
            if lo & 1:
                result = self._py_op(result, float(self.value[lo]))
                lo += 1
            if hi & 1:
                hi -= 1
                result = self._py_op(result, float(self.value[hi]))
            lo >>= 1
            hi >>= 1
        return result

    def leaves(self) -> np.ndarray:
        """A view of the leaf values (length ``size``)."""
        return self.value[self.capacity : self.capacity + self.size]

    def set_all(self, values: np.ndarray) -> None:
        """Replace every leaf at once and rebuild the inner nodes bottom-up."""
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (self.size,):
            raise ValueError(f'SegmentTree.set_all: expected shape ({self.size},), got {values.shape}')
        self.value[:] = self.neutral_element
        self.value[self.capacity : self.capacity + self.size] = values
        width = self.capacity // 2
        while width >= 1:
            nodes = np.arange(width, 2 * width)
            self.value[nodes] = self.operation(self.value[2 * nodes], self.value[2 * nodes + 1])
            width //= 2


class SumSegmentTree(SegmentTree):
    """Sum tree: sampling an index with probability proportional to its leaf value in O(log n)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, np.add, 0.0)

    def find_prefixsum_idx(self, prefixsum: float | np.ndarray) -> np.ndarray:
        """For each ``p`` the smallest leaf index ``i`` with ``sum(leaves[:i+1]) > p``.

        ``p`` should lie in ``[0, total)``. Leaves of value 0 are never returned because a zero
        right subtree leaves ``p < left`` (its parent's sum equals its left child's).
        """
        prefix = np.array(prefixsum, dtype=np.float64, ndmin=1)
        node = np.ones(prefix.shape, dtype=np.int64)
        value = self.value
        while node[0] < self.capacity:
            left = node << 1
            left_val = value[left]
            go_right = prefix >= left_val
            prefix = np.where(go_right, prefix - left_val, prefix)
            node = left + go_right
        idx = node - self.capacity
        # Float rounding can at worst push past the last real leaf; clamp into range.
        np.minimum(idx, self.size - 1, out=idx)
        return idx


class MinSegmentTree(SegmentTree):
    """Min tree: the smallest priority, used to normalise importance-sampling weights."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, np.minimum, float('inf'))


class ThruputController:
    """Limits how fast a buffer may be pushed to relative to how fast it is sampled from.

    Counts pushed and sampled items over the last ``window_seconds``; with ``rate = pushed / sampled``:

    - ``can_push(n)`` is False when ``rate`` would exceed ``push_sample_rate_limit.max`` (the
      collector is too far ahead of the learner; the buffer then drops the push and logs it),
    - ``can_sample(n)`` is False when ``rate`` would fall below ``push_sample_rate_limit.min``
      (the learner re-reads data too often, i.e. sample/push > 1/min; ``sample`` returns None),
      or when the buffer holds fewer than ``sample_min_limit_ratio * n`` items.

    Before anything has been sampled in the window, pushing is never limited (the learner has
    not started). The defaults (max=inf, min=0, ratio=1) limit nothing beyond "enough data".
    """

    def __init__(self, cfg: dict[str, Any]) -> None:
        limit = cfg.get('push_sample_rate_limit', {})
        self.max_rate = float(limit.get('max', float('inf')))
        self.min_rate = float(limit.get('min', 0.0))
        self.window_seconds = float(cfg.get('window_seconds', 30))
        self.sample_min_limit_ratio = float(cfg.get('sample_min_limit_ratio', 1))
        if self.min_rate < 0 or self.max_rate < self.min_rate:
            raise ValueError(
                f'thruput_controller.push_sample_rate_limit: need 0 <= min <= max, got '
                f'min={self.min_rate}, max={self.max_rate}'
            )
        if self.sample_min_limit_ratio < 0:
            raise ValueError(
                f'thruput_controller.sample_min_limit_ratio must be >= 0, got {self.sample_min_limit_ratio}'
            )
        self.active = self.max_rate != float('inf') or self.min_rate > 0
        self._push: deque = deque()
        self._sample: deque = deque()
        self._push_sum = 0
        self._sample_sum = 0

    def _evict(self, now: float) -> None:
        horizon = now - self.window_seconds
        while self._push and self._push[0][0] < horizon:
            self._push_sum -= self._push.popleft()[1]
        while self._sample and self._sample[0][0] < horizon:
            self._sample_sum -= self._sample.popleft()[1]

    def can_push(self, n: int) -> bool:
        if not self.active or self.max_rate == float('inf'):
            return True
        self._evict(time.monotonic())
        if self._sample_sum == 0:
            return True
        return (self._push_sum + n) / self._sample_sum <= self.max_rate

    def can_sample(self, n: int, valid_count: int) -> bool:
        if valid_count < max(1, self.sample_min_limit_ratio * n):
            return False
        if not self.active or self.min_rate <= 0:
            return True
        self._evict(time.monotonic())
        return self._push_sum / (self._sample_sum + n) >= self.min_rate

    def record_push(self, n: int) -> None:
        if self.active:
            self._push.append((time.monotonic(), n))
            self._push_sum += n

    def record_sample(self, n: int) -> None:
        if self.active:
            self._sample.append((time.monotonic(), n))
            self._sample_sum += n
