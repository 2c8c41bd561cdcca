"""Prioritized replay (``advanced``): sum/min segment trees, IS weights, max_use, max_staleness, rate limits."""

from __future__ import annotations

from typing import Any

import numpy as np

from ding.utils.registry import BUFFER_REGISTRY

from .naive_buffer import _as_list, _RingBuffer
from .utils import MinSegmentTree, SumSegmentTree, ThruputController

# Priorities are floored here: a zero priority would make an item unreachable and the IS normaliser infinite.
_MIN_PRIORITY = 1e-8


def _to_float_array(value: Any, what: str) -> np.ndarray:
    if hasattr(value, 'detach'):
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise ValueError(f'AdvancedReplayBuffer: {what} must be numbers, got {type(value).__name__}') from e
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f'AdvancedReplayBuffer: {what} must be finite and >= 0, got {arr[:8].tolist()}...')
    return arr


@BUFFER_REGISTRY.register('advanced')
class AdvancedReplayBuffer(_RingBuffer):
    """Prioritized experience replay over a FIFO ring.

    - Item ``i`` is drawn with probability ``p_i^alpha / sum_j p_j^alpha`` (stratified: the total mass
      is cut into ``size`` equal strata and one item is drawn from each). A new item gets its own
      ``priority`` key if it has one, else the largest priority seen so far.
    - Each sample dict carries ``IS = (N * P(i))^-beta / max_j (N * P(j))^-beta`` in (0, 1]; ``beta``
      moves linearly from its initial value to 1 over ``anneal_step`` sample calls.
    - An item sampled ``max_use`` times is removed after that sample.
    - On ``sample``, items with ``cur_learner_iter - collect_iter > max_staleness`` are removed first
      (counted in ``staleness_remove_count``); items without ``collect_iter`` never go stale.
    - ``thruput_controller`` limits push/sample rates (see ``ThruputController``): a refused push is
      dropped (counted in ``refused_push_count``), a refused sample returns None.
    - ``priority=False`` keeps all other features but samples uniformly (every ``IS`` is 1).
    - ``replace`` is accepted for interface compatibility; stratified sampling can still return an
      item twice when its priority mass spans more than one stratum.
    """

    config = dict(
        type='advanced',
        replay_buffer_size=10000,
        deepcopy=False,
        enable_track_used_data=False,
        priority=True,
        alpha=0.6,
        beta=0.4,
        anneal_step=int(1e5),
        max_use=float('inf'),
        max_staleness=float('inf'),
        thruput_controller=dict(
            push_sample_rate_limit=dict(max=float('inf'), min=0),
            window_seconds=30,
            sample_min_limit_ratio=1,
        ),
        monitor=dict(
            sampled_data_attr=dict(print_freq=200),
            periodic_thruput=dict(seconds=60),
        ),
    )

    def __init__(
        self,
        cfg: dict | None = None,
        tb_logger: Any | None = None,
        exp_name: str = 'default_experiment',
        instance_name: str = 'buffer',
    ) -> None:
        super().__init__(cfg, tb_logger, exp_name, instance_name)
        merged = self._cfg  # the given config completed with the defaults
        if 'throughput_control' in merged:  # accepted spelling; same keys as thruput_controller
            merged.thruput_controller.update(merged.throughput_control)
        self._thruput_period = float(merged.monitor.periodic_thruput.get('seconds', 60) or 0)
        self._sample_print_freq = int(merged.monitor.sampled_data_attr.get('print_freq', 200) or 0)
        self._priority = bool(merged.priority)
        self._alpha = float(merged.alpha) if self._priority else 0.0
        self._beta = float(merged.beta)
        if not 0 <= self._beta <= 1 or self._alpha < 0:
            raise ValueError(
                f'AdvancedReplayBuffer: need alpha >= 0 and 0 <= beta <= 1, got alpha={merged.alpha}, beta={merged.beta}'
            )
        self._beta_step = (1.0 - self._beta) / merged.anneal_step if merged.anneal_step else 0.0
        self._max_use = merged.max_use
        self._max_staleness = merged.max_staleness
        if self._max_use <= 0 or self._max_staleness < 0:
            raise ValueError(
                f'AdvancedReplayBuffer: need max_use > 0 and max_staleness >= 0, got '
                f'max_use={merged.max_use}, max_staleness={merged.max_staleness}'
            )
        self._thruput = ThruputController(merged.thruput_controller)
        size = self._replay_buffer_size
        self._sum_tree = SumSegmentTree(size)
        self._min_tree = MinSegmentTree(size)
        self._use_count = np.zeros(size, dtype=np.int64)
        self._collect_iter = np.full(size, np.inf)
        self._max_priority = 1.0
        self._sample_calls = 0
        self._staleness_remove_count = 0
        self._use_remove_count = 0
        self._refused_push_count = 0
        self._refused_sample_count = 0

    # ---- properties ----------------------------------------------------------------------------
    @property
    def beta(self) -> float:
        return self._beta

    @property
    def staleness_remove_count(self) -> int:
        return self._staleness_remove_count

    @property
    def use_remove_count(self) -> int:
        return self._use_remove_count

    @property
    def refused_push_count(self) -> int:
        return self._refused_push_count

    @property
    def refused_sample_count(self) -> int:
        return self._refused_sample_count

    # ---- push ----------------------------------------------------------------------------------
    def push(self, data: list[dict] | dict, cur_collector_envstep: int = -1) -> None:
        items = _as_list(data, type(self).__name__)
        if not items:
            return
        with self._lock:
            if not self._thruput.can_push(len(items)):
                self._refused_push_count += len(items)
                refused = True
            else:
                refused = False
                self._thruput.record_push(len(items))
                kept = items[-self._replay_buffer_size :]
                if self._priority:
                    raw = [it.get('priority') for it in kept]
                    pri = np.array([self._max_priority if p is None else float(p) for p in raw], dtype=np.float64)
                    pri = _to_float_array(pri, "pushed 'priority'")
                    self._max_priority = max(self._max_priority, float(pri.max()))
                else:
                    pri = np.ones(len(kept))
                collect_iter = np.array([it.get('collect_iter', np.inf) for it in kept], dtype=np.float64)
                slots = self._store(items)
                self._set_priority(slots, pri)
                self._use_count[slots] = 0
                self._collect_iter[slots] = collect_iter
        if refused:
            self.logger.warning(
                f'[{self._instance_name}] push of {len(items)} items refused by thruput_controller '
                f'(push/sample rate above {self._thruput.max_rate})'
            )
            return
        self._count_thruput('push', len(items))

    def _set_priority(self, slots: np.ndarray, priority: np.ndarray) -> None:
        value = np.maximum(priority, _MIN_PRIORITY) ** self._alpha
        self._sum_tree[slots] = value
        self._min_tree[slots] = value

    # ---- sample --------------------------------------------------------------------------------
    def sample(
        self, size: int, cur_learner_iter: int = -1, sample_range: slice | None = None, replace: bool = False
    ) -> list[dict] | None:
        """``size`` items by priority with ``IS`` weights, or None (too little data / rate limit)."""
        if size <= 0:
            raise ValueError(f'AdvancedReplayBuffer.sample: size must be positive, got {size}')
        with self._lock:
            if self._max_staleness != float('inf') and self._valid_count:
                self._remove_stale(cur_learner_iter)
            if not self._thruput.can_sample(size, self._valid_count):
                if self._valid_count >= size:
                    self._refused_sample_count += 1
                return None
            slots = self._draw(size, sample_range)
            if slots is None:
                return None
            weights = self._is_weights(slots)
            out = self._copy_out(slots)
            for item, w in zip(out, weights.tolist()):
                item['IS'] = w
            if self._beta_step:
                self._beta = min(1.0, self._beta + self._beta_step)
            np.add.at(self._use_count, slots, 1)
            self._thruput.record_sample(size)
            self._sample_calls += 1
            freq = self._sample_print_freq
            if freq and self._tb_logger is not None and self._sample_calls % freq == 0:
                self._log_sampled(slots, cur_learner_iter)
            if self._max_use != float('inf'):
                used_up = np.unique(slots[self._use_count[slots] >= self._max_use])
                if len(used_up):
                    self._remove(used_up)
                    self._use_remove_count += len(used_up)
        self._count_thruput('sample', size)
        return out

    def _draw(self, size: int, sample_range: slice | None) -> np.ndarray | None:
        strata = (np.arange(size) + np.random.random(size)) / size
        if sample_range is None:
            return self._sum_tree.find_prefixsum_idx(strata * self._sum_tree.reduce())
        candidates = self._logical_slots(sample_range)
        if len(candidates) == 0 or len(candidates) < size:
            return None
        cdf = np.cumsum(self._sum_tree[candidates])
        pos = np.searchsorted(cdf, strata * cdf[-1], side='right')
        return candidates[np.minimum(pos, len(candidates) - 1)]

    def _is_weights(self, slots: np.ndarray) -> np.ndarray:
        if not self._priority:
            return np.ones(len(slots))
        # (N*P(i))^-beta / (N*P_min)^-beta == (p_i / p_min)^-beta: N and the total cancel out.
        return (self._sum_tree[slots] / self._min_tree.reduce()) ** (-self._beta)

    def _remove_stale(self, cur_learner_iter: int) -> None:
        stale = np.nonzero(cur_learner_iter - self._collect_iter > self._max_staleness)[0]
        if len(stale):
            self._remove(stale)
            self._staleness_remove_count += len(stale)

    def _remove(self, slots: np.ndarray) -> None:
        for s in slots.tolist():
            self._data[s] = None
        self._occupied[slots] = False
        self._sum_tree[slots] = 0.0
        self._min_tree[slots] = float('inf')
        self._use_count[slots] = 0
        self._collect_iter[slots] = np.inf
        self._valid_count -= len(slots)
        self._thruput_counts['remove'] += len(slots)

    def _log_sampled(self, slots: np.ndarray, cur_learner_iter: int) -> None:
        stale = cur_learner_iter - self._collect_iter[slots]
        stats = {
            'use_avg': float(self._use_count[slots].mean()),
            'priority_avg': float(np.mean(self._sum_tree[slots])),
            'staleness_avg': float(stale[np.isfinite(stale)].mean()) if np.isfinite(stale).any() else 0.0,
            'beta': self._beta,
            'valid_count': self._valid_count,
        }
        if self._tb_logger is None:
            return
        for k, v in stats.items():
            self._tb_logger.add_scalar(f'{self._instance_name}_iter/{k}', v, cur_learner_iter)

    # ---- update --------------------------------------------------------------------------------
    def update(self, info: dict[str, list[Any]]) -> None:
        """Set new priorities; entries whose slot now holds another item (or nothing) are skipped."""
        for key in ('replay_unique_id', 'replay_buffer_idx', 'priority'):
            if key not in info:
                raise KeyError(f"AdvancedReplayBuffer.update: priority info is missing '{key}' (got {list(info)})")
        ids, idxs = list(info['replay_unique_id']), info['replay_buffer_idx']
        if hasattr(idxs, 'tolist'):
            idxs = idxs.tolist()
        priority = _to_float_array(info['priority'], "updated 'priority'")
        if not len(ids) == len(idxs) == len(priority):
            raise ValueError(
                f'AdvancedReplayBuffer.update: lengths differ: {len(ids)} ids, {len(idxs)} idx, '
                f'{len(priority)} priorities'
            )
        if not self._priority:
            return
        with self._lock:
            data = self._data
            keep = [
                k
                for k, (uid, idx) in enumerate(zip(ids, idxs))
                if 0 <= idx < self._replay_buffer_size
                and data[idx] is not None
                and data[idx]['replay_unique_id'] == uid
            ]
            if not keep:
                return
            slots = np.asarray([idxs[k] for k in keep], dtype=np.int64)
            pri = priority[keep]
            self._set_priority(slots, pri)
            self._max_priority = max(self._max_priority, float(pri.max()))

    # ---- housekeeping --------------------------------------------------------------------------
    def clear(self) -> None:
        with self._lock:
            size = self._replay_buffer_size
            self._data = [None] * size
            self._occupied[:] = False
            self._tail = 0
            self._valid_count = 0
            self._sum_tree = SumSegmentTree(size)
            self._min_tree = MinSegmentTree(size)
            self._use_count[:] = 0
            self._collect_iter[:] = np.inf

    def state_dict(self) -> dict[str, Any]:
        """Plain containers and tensors only, so ``torch.load(..., weights_only=True)`` can read it back."""
        import torch  # deferred: the parallel coordinator keeps its buffers without torch

        with self._lock:
            state = self._ring_state()
            state.update(
                priority=torch.from_numpy(self._sum_tree.leaves().copy()),
                use_count=torch.from_numpy(self._use_count.copy()),
                collect_iter=torch.from_numpy(self._collect_iter.copy()),
                max_priority=self._max_priority,
                beta=self._beta,
                staleness_remove_count=self._staleness_remove_count,
                use_remove_count=self._use_remove_count,
            )
            return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ('priority', 'use_count', 'collect_iter', 'max_priority', 'beta'):
            if key not in state:
                raise KeyError(f"AdvancedReplayBuffer.load_state_dict: missing key '{key}'")
        with self._lock:
            self._load_ring_state(state)
            leaves = np.asarray(state['priority'], dtype=np.float64)
            self._sum_tree.set_all(leaves)
            self._min_tree.set_all(np.where(self._occupied, leaves, np.inf))
            self._use_count = np.asarray(state['use_count'], dtype=np.int64).copy()
            self._collect_iter = np.asarray(state['collect_iter'], dtype=np.float64).copy()
            self._max_priority = float(state['max_priority'])
            self._beta = float(state['beta'])
            self._staleness_remove_count = int(state.get('staleness_remove_count', 0))
            self._use_remove_count = int(state.get('use_remove_count', 0))
