"""Data-parallel learners (``multi_learner.mode='data_parallel'``): the rounds in which the coordinator serves
data to the ranks of one learner group (``LearnerGroup``), and which collector's data each rank reads.

Every optimizer step of a rank is an all-reduce with every other rank, so every rank must train the same number
of batches. The coordinator therefore serves data in rounds: a round starts once every rank has asked for data
and gives every rank its batches at once, or tells every rank that no round follows. Closing the group then
stops every rank after the same iteration (``stop_at_iter``: the batches it was given), and no rank is left
waiting in a collective.

Which data a rank reads (``assignment``): ``random``: one pool (the learner task's buffer) sampled by every rank;
the samples two ranks trained on in the same round are counted (``duplicate_samples``). ``bins``: rank r owns
the collectors ``r, r + N, r + 2N, ...`` (N ranks) and reads their buffer only (``bin_buffer_id``); once the
collection is over (the commander gives no more collector tasks and every collector task ended) a rank whose
buffer cannot fill its batches reads from the fullest other buffer (``on_group_done='assist'``), or the group's
data ends there (``'short'``: the samples left in the other buffers are counted, ``left_samples``).

Consumed-once data (``replay_buffer.max_use=1``) is drained at the end: the last round splits what is left over
every batch (uneven batches are fine: ``sync_gradients`` weighs each rank by its samples); fewer samples than
batches are left untrained and counted. Replay data (sampled many times) is never drained: the run ends when the
commander says so.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

ASSIGNMENTS = ('random', 'bins')
GROUP_DONE = ('assist', 'short')


def bin_buffer_id(buffer_id: str, rank: int) -> str:
    """The buffer of rank ``rank``'s collectors (``assignment='bins'``)."""
    return f'{buffer_id}@bin{rank}'


def collector_bin(collector: str, world_size: int) -> int:
    """The rank owning collector ``collectorI``: ``I mod world_size`` (every rank owns at least one when there
    are as many collectors as learners, and none is shared)."""
    digits = ''.join(ch for ch in reversed(collector) if ch.isdigit())[::-1]
    index = int(digits) if digits and collector.endswith(digits) else 0
    return index % world_size


class GroupData:
    """What ``LearnerGroup`` needs from the data plane: sample ``batch_size`` metadata from a buffer (None if
    too few), how many a buffer holds, wait for new data, and whether the collection is over."""

    def __init__(
        self,
        sample: Callable[[str, int, int], list[dict] | None],
        count: Callable[[str], int],
        wait_for_data: Callable[[float], None],
        collection_over: Callable[[], bool],
    ) -> None:
        self.sample = sample
        self.count = count
        self.wait_for_data = wait_for_data
        self.collection_over = collection_over


class LearnerGroup:
    """The ranks of one data-parallel learner task and the rounds of data served to them. Thread-safe: each
    rank's task thread calls ``serve``; ``finish`` ends the rounds (every waiting ``serve`` returns None)."""

    def __init__(
        self,
        buffer_id: str,
        world_size: int,
        data: GroupData,
        assignment: str = 'random',
        on_group_done: str = 'assist',
        consumed_once: bool = False,
        info: Callable[[str], None] = lambda s: None,
    ) -> None:
        if assignment not in ASSIGNMENTS:
            raise ValueError(f'multi_learner.assignment must be one of {ASSIGNMENTS}, got {assignment!r}')
        if on_group_done not in GROUP_DONE:
            raise ValueError(f'multi_learner.on_group_done must be one of {GROUP_DONE}, got {on_group_done!r}')
        self.buffer_id = buffer_id
        self.world_size = int(world_size)
        self.assignment = assignment
        self.on_group_done = on_group_done
        self.consumed_once = consumed_once
        self._data = data
        self._info = info
        self._cond = threading.Condition()
        self._demands: dict[int, dict[str, Any]] = {}
        self._results: dict[int, list[list[dict]]] = {}
        self._sampling = False
        self._finished = False
        self.finish_reason = ''
        self.served_batches = [0] * self.world_size  # batches each rank was given (and accepted)
        self.rounds = 0
        self.served_samples = 0
        self.duplicate_samples = 0  # samples trained by two ranks in the same round (counted once per extra rank)
        self.assisted_batches = 0  # bins + assist: batches a rank read from another rank's buffer
        self.left_samples = 0  # samples never trained: too few for the last round, or left in bins ('short')
        self.final_iters: list[int | None] = [None] * self.world_size  # where each rank stopped (its close answer)

    # ---- buffers ---------------------------------------------------------------------------------------
    def buffer_of(self, rank: int) -> str:
        return bin_buffer_id(self.buffer_id, rank) if self.assignment == 'bins' else self.buffer_id

    def buffer_ids(self) -> list[str]:
        """Every buffer the group reads."""
        return sorted({self.buffer_of(r) for r in range(self.world_size)})

    def push_target(self, collector: str | None) -> str:
        """The buffer a collector's samples go to."""
        if self.assignment != 'bins' or collector is None:
            return self.buffer_id
        return bin_buffer_id(self.buffer_id, collector_bin(collector, self.world_size))

    # ---- rounds ------------------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._finished

    def finish(self, reason: str) -> None:
        """No further round: every rank waiting in ``serve`` (or calling it later) gets None."""
        with self._cond:
            if not self._finished:
                self._finished = True
                self.finish_reason = reason
                self._info(f'learner group of {self.buffer_id}: no more rounds ({reason}); {self.describe()}')
            self._cond.notify_all()

    def accepted(self, rank: int, batches: int) -> None:
        """Rank ``rank`` was sent the ``batches`` of its round (its learn task went out)."""
        with self._cond:
            self.served_batches[rank] += batches

    def rank_ended(self, rank: int, last_iter: Any) -> None:
        """Rank ``rank`` was closed at iteration ``last_iter`` (its close answer)."""
        with self._cond:
            self.final_iters[rank] = int(last_iter) if isinstance(last_iter, int) else None

    def stop_iterations(self) -> int:
        """Batches every rank received: where every rank stops when the group closes."""
        with self._cond:
            return min(self.served_batches)

    def serve(self, rank: int, demand: dict[str, Any], alive: Callable[[], bool]) -> list[list[dict]] | None:
        """The batches of rank ``rank``'s next round for ``demand`` (``batch_size``, ``num_batches``,
        ``cur_learner_iter``); None when no round follows (``finish``, or ``alive()`` turned False)."""
        with self._cond:
            self._demands[rank] = demand
            self._cond.notify_all()
            while True:
                if rank in self._results:
                    return self._results.pop(rank)
                if self._finished or not alive():
                    return None
                if len(self._demands) == self.world_size and not self._sampling:
                    self._sampling = True
                    break
                self._cond.wait(0.1)
        results = self._sample_round(alive)
        with self._cond:
            self._sampling = False
            if results is None:
                self._finished = True
                self.finish_reason = self.finish_reason or 'the data ended'
            else:
                self._results = dict(enumerate(results))
                self._demands.clear()
                self.rounds += 1
            self._cond.notify_all()
            if results is None:
                return None
            return self._results.pop(rank)

    def _sample_round(self, alive: Callable[[], bool]) -> list[list[list[dict]]] | None:
        """Every rank's batches of one round; waits for data; None when the data ended or the group finished."""
        demand = self._demands[0]
        batch_size = int(demand['batch_size'])
        num_batches = int(demand.get('num_batches', 1))
        cur_iter = int(demand.get('cur_learner_iter', 0))
        while not self._finished and alive():
            over = self._data.collection_over()  # read before sampling: data pushed meanwhile is seen next time
            round_ = self._try_round(batch_size, num_batches, cur_iter, over)
            if round_ is not None:
                self._count_duplicates(round_)
                return round_
            if self._finished:  # e.g. 'short': a bin is exhausted
                return None
            if over and self.consumed_once:
                return self._last_round(batch_size, num_batches, cur_iter)
            self._data.wait_for_data(0.1)
        return None

    def _try_round(
        self, batch_size: int, num_batches: int, cur_iter: int, collection_over: bool
    ) -> list[list[list[dict]]] | None:
        """A full round (``num_batches`` batches of ``batch_size`` per rank), or None (nothing taken then)."""
        needed = batch_size * num_batches
        sources = self._sources(needed, collection_over)
        if sources is None:
            return None
        if self.consumed_once:
            # Consumed data must not be taken unless the whole round can be formed.
            demand: Counter[str] = Counter(sources)
            if any(self._data.count(b) < needed * n for b, n in demand.items()):
                return None
        round_: list[list[list[dict]]] = []
        for rank, source in enumerate(sources):
            batches = []
            for _ in range(num_batches):
                batch = self._take(source, batch_size, cur_iter) if self.consumed_once else None
                batch = batch or self._data.sample(source, batch_size, cur_iter)
                if batch is None:  # replay data (not consumed): what was drawn goes back unused
                    return None
                batches.append(batch)
            if source != self.buffer_of(rank):
                self.assisted_batches += num_batches
            round_.append(batches)
        return round_

    def _sources(self, needed: int, collection_over: bool) -> list[str] | None:
        """The buffer each rank reads this round; None when a bins group cannot go on ('short')."""
        own = [self.buffer_of(r) for r in range(self.world_size)]
        if self.assignment != 'bins' or not collection_over:
            return own
        counts = {b: self._data.count(b) for b in own}
        short = [b for b in own if counts[b] < needed]
        if not short:
            return own
        if self.on_group_done == 'short':
            if not self._finished:
                self.left_samples += sum(counts.values())
                self.finish(f'the data of {short[0]} is exhausted (short); {sum(counts.values())} samples left')
            return None
        # assist: a rank whose collectors are done and whose buffer cannot fill its batches reads the fullest other
        sources = []
        for b in own:
            if counts[b] >= needed:
                counts[b] -= needed
                sources.append(b)
                continue
            donor = max(counts, key=lambda k: counts[k])
            counts[donor] -= needed
            sources.append(donor)
        return sources

    def _last_round(self, batch_size: int, num_batches: int, cur_iter: int) -> list[list[list[dict]]] | None:
        """Consumed-once data after the collection ended: what is left, split over every batch of one round;
        None (and the rest counted as left) when fewer samples than batches remain."""
        buffers = self.buffer_ids()
        left = sum(self._data.count(b) for b in buffers)
        slots = self.world_size * num_batches
        if left < slots:
            self.left_samples += left
            return None
        pool: list[dict] = []
        for b in buffers:
            pool.extend(self._take(b, self._data.count(b), cur_iter))
        pool = pool[: slots * batch_size]
        self.left_samples += left - len(pool)
        cuts = [len(pool) * i // slots for i in range(slots + 1)]
        batches = [pool[cuts[i] : cuts[i + 1]] for i in range(slots)]
        round_ = [batches[r * num_batches : (r + 1) * num_batches] for r in range(self.world_size)]
        self._count_duplicates(round_)
        return round_

    def _take(self, buffer_id: str, size: int, cur_iter: int) -> list[dict]:
        """Up to ``size`` distinct samples of consumed-once data: a prioritized draw may pick one sample twice
        (it is consumed once all the same), so the copies are dropped and more drawn."""
        taken: list[dict] = []
        seen: set[str] = set()
        while len(taken) < size:
            want = min(size - len(taken), self._data.count(buffer_id))
            drawn = self._data.sample(buffer_id, want, cur_iter) if want > 0 else None
            if not drawn:
                break
            for meta in drawn:
                key = str(meta.get('data_id'))
                if key not in seen:
                    seen.add(key)
                    taken.append(meta)
        return taken

    def _count_duplicates(self, round_: list[list[list[dict]]]) -> None:
        owners: Counter[str] = Counter()
        samples = 0
        for batches in round_:
            ids = {str(meta.get('data_id')) for batch in batches for meta in batch}
            owners.update(ids)
            samples += sum(len(batch) for batch in batches)
        self.served_samples += samples
        self.duplicate_samples += sum(n - 1 for n in owners.values() if n > 1)

    # ---- figures -----------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {
                'world_size': self.world_size,
                'assignment': self.assignment,
                'on_group_done': self.on_group_done,
                'rounds': self.rounds,
                'served_batches': list(self.served_batches),
                'served_samples': self.served_samples,
                'duplicate_samples': self.duplicate_samples,
                'duplicate_rate': self.duplicate_samples / self.served_samples if self.served_samples else 0.0,
                'assisted_batches': self.assisted_batches,
                'left_samples': self.left_samples,
                'final_iters': list(self.final_iters),
                'finish_reason': self.finish_reason,
            }

    def describe(self) -> str:
        s = self.stats()
        return (
            f'{s["world_size"]} ranks, {s["assignment"]}: {s["rounds"]} rounds, {s["served_samples"]} samples served, '
            f'{s["duplicate_samples"]} trained by two ranks in one round ({100 * s["duplicate_rate"]:.2f}%), '
            f"{s['assisted_batches']} batches read from another rank's buffer, {s['left_samples']} samples left"
        )


class LearnerGroups:
    """The coordinator's data-parallel groups, one per learner task (re-formed when a hand-over failed).

    ``world_size``: the learners configured; ``data``: the data plane's side (``GroupData``); ``ensure_buffer``:
    creates a buffer from ``{'buffer_id', 'replay_buffer_cfg'}`` (the bins' buffers)."""

    def __init__(
        self,
        world_size: int,
        data: GroupData,
        ensure_buffer: Callable[[dict[str, Any]], None],
        info: Callable[[str], None],
    ) -> None:
        self.world_size = int(world_size)
        self._data = data
        self._ensure_buffer = ensure_buffer
        self._info = info
        self._lock = threading.Lock()
        self._groups: dict[str, LearnerGroup] = {}  # by buffer id
        self.last: LearnerGroup | None = None

    def for_task(self, task: dict[str, Any]) -> LearnerGroup | None:
        """The group that runs learner task ``task``; None when its learners do not train data-parallel."""
        multi = (task.get('learner_cfg') or {}).get('multi_learner') or {}
        if multi.get('mode') != 'data_parallel' or self.world_size < 2:
            return None
        buffer_cfg = task.get('replay_buffer_cfg') or {}
        with self._lock:
            group = self._groups.get(task['buffer_id'])
            if group is None or group.finished:
                group = LearnerGroup(
                    task['buffer_id'],
                    self.world_size,
                    self._data,
                    assignment=multi.get('assignment', 'random'),
                    on_group_done=multi.get('on_group_done', 'assist'),
                    consumed_once=buffer_cfg.get('max_use') == 1,
                    info=self._info,
                )
                self._groups[task['buffer_id']] = group
                self.last = group
        for buffer_id in group.buffer_ids():
            self._ensure_buffer({'buffer_id': buffer_id, 'replay_buffer_cfg': buffer_cfg})
        return group

    def route(self, buffer_id: str, collector: str) -> str:
        """The buffer a collector's samples for ``buffer_id`` go to (its bin's, with ``assignment='bins'``)."""
        group = self._groups.get(buffer_id)
        return group.push_target(collector) if group is not None else buffer_id

    def buffers_of(self, buffer_id: str) -> list[str]:
        """Every buffer of the learner task whose buffer is ``buffer_id`` (its bins too)."""
        group = self._groups.get(buffer_id)
        return sorted({buffer_id, *(group.buffer_ids() if group is not None else [])})

    def draining(self) -> bool:
        """Whether a group still trains on consumed-once data that must not be lost when the collection ends."""
        with self._lock:
            return any(g.consumed_once and not g.finished for g in self._groups.values())

    def stats(self) -> dict[str, Any] | None:
        group = self.last
        return group.stats() if group is not None else None

    def describe(self) -> str | None:
        group = self.last
        return group.describe() if group is not None else None


__all__ = ['ASSIGNMENTS', 'GROUP_DONE', 'GroupData', 'LearnerGroup', 'LearnerGroups', 'bin_buffer_id', 'collector_bin']
