"""The coordinator's data plane: one replay buffer of sample metadata per learner task, the sample files
those metadata point to (deleted once no buffer refers to them), and the pacing of collectors."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.utils.file_names import manifest_path, split_data_id
from ding.worker.replay_buffer import create_buffer
from ding.worker.replay_service import REPLAY_DATA_ID, check_replay_client_config


class ReplayTickets:
    """The coordinator's stand-in for a learner task's buffer when the replay service holds the samples
    (``replay_address``): it counts what the collectors inserted and, once a batch can be drawn, answers a
    learner's demand with ``batch_size`` tickets (``REPLAY_DATA_ID``); the learner samples the batch from the
    replay service itself and sends the priorities there."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._count = 0

    def push(self, data: list[dict], cur_collector_envstep: int = -1) -> None:
        self._count = min(self._size, self._count + len(data))

    def sample(self, size: int, cur_learner_iter: int) -> list[dict] | None:
        if self._count < size:
            return None
        return [{'data_id': REPLAY_DATA_ID, 'policy_iter': cur_learner_iter}] * size

    def update(self, info: Any) -> None:
        """Priorities go to the replay service from the learner."""

    def count(self) -> int:
        return self._count

    def stored_data(self) -> list[dict]:
        return []

    def start(self) -> None:
        """Nothing runs in the background."""

    def close(self) -> None:
        """Nothing to release."""


class DataPlane:
    """Buffers, sample files and pacing for one run.

    ``coor_cfg``: the coordinator config (``max_samples_per_iter``, ``pacing_warmup_samples``,
    ``data_gc_interval``, ``data_gc_min_age``); ``path_data``: where collectors write the sample files;
    ``train_iter``: the learner's iteration so far (pacing grants samples per iteration). Thread-safe.
    """

    def __init__(
        self,
        coor_cfg: EasyDict,
        path_data: str,
        exp_name: str,
        train_iter: Callable[[], int],
        info: Callable[[str], None],
        error: Callable[[str], None],
    ) -> None:
        self._path_data = path_data
        self._exp_name = exp_name
        self._train_iter = train_iter
        self._info = info
        self._error = error
        self._gc_interval = float(coor_cfg.data_gc_interval)
        self._gc_min_age = float(coor_cfg.data_gc_min_age)
        pace = coor_cfg.max_samples_per_iter
        # pacing: collectors may push while pushed_samples < pacing_warmup + max_samples_per_iter * train_iter
        self.max_samples_per_iter: float | None = None if pace is None else float(pace)
        self.pacing_warmup = float(coor_cfg.pacing_warmup_samples)
        self._learner_starving = False
        self.paused = False  # run control: no data to the learner, none from collectors
        self._stopped = threading.Event()
        self._gc_thread: threading.Thread | None = None
        self._replay_buffers: dict[str, Any] = {}
        self._closed_buffers: set[str] = set()
        self._buffer_lock = threading.Lock()
        self._data_arrived = threading.Condition()
        self._stats_lock = threading.Lock()
        self._data_files: set[str] = set()  # sample files whose metadata came through this coordinator
        self.pushed_samples = 0
        self.sampled_batches = 0
        self.buffer_stale_removed = 0

    # ---- buffers ---------------------------------------------------------------------------------
    def create_buffer(self, task: dict) -> Any:
        """A started replay buffer for learner task ``task`` (its ``replay_buffer_cfg``, ``buffer_id``); tickets
        when the samples go to a replay service."""
        buffer_cfg = task['replay_buffer_cfg']
        if check_replay_client_config(buffer_cfg) is not None:
            self._info(f'replay buffer {task["buffer_id"]}: the replay service at {buffer_cfg["replay_address"]}')
            return ReplayTickets(int(buffer_cfg.get('replay_buffer_size', 10000)))
        buffer = create_buffer(
            EasyDict(task['replay_buffer_cfg']), exp_name=self._exp_name, instance_name=task['buffer_id']
        )
        buffer.start()
        self._info(f'replay buffer {task["buffer_id"]} created')
        return buffer

    def ensure_buffer(self, task: dict) -> None:
        """The buffer of learner task ``task``, created on its first assignment and kept across retries."""
        with self._buffer_lock:
            if task['buffer_id'] not in self._replay_buffers:
                self._replay_buffers[task['buffer_id']] = self.create_buffer(task)

    def buffer(self, buffer_id: str) -> Any | None:
        with self._buffer_lock:
            return self._replay_buffers.get(buffer_id)

    def buffer_status(self, buffer_id: str) -> tuple[bool, bool]:
        """Whether the buffer exists now, and whether it was closed (its learner task is over)."""
        with self._buffer_lock:
            return buffer_id in self._replay_buffers, buffer_id in self._closed_buffers

    def close_buffer(self, buffer_id: str | None) -> None:
        if buffer_id is None:
            return
        with self._buffer_lock:
            buffer = self._replay_buffers.pop(buffer_id, None)
            self._closed_buffers.add(buffer_id)
        if buffer is not None:
            removed = int(getattr(buffer, 'staleness_remove_count', 0) or 0)
            with self._stats_lock:
                self.buffer_stale_removed += removed
            buffer.close()
            self._info(f'replay buffer {buffer_id} closed ({removed} stale samples removed)')

    def start(self) -> None:
        """Start deleting, every ``data_gc_interval`` s, the sample files no buffer needs any more."""
        if self._gc_interval > 0:
            self._gc_thread = threading.Thread(target=self._data_gc_loop, name='coordinator_data_gc', daemon=True)
            self._gc_thread.start()

    def stop(self) -> None:
        """Wake every waiter and end the garbage loop (the run is ending)."""
        self._stopped.set()
        self.notify()

    def close(self, keep_data: bool) -> None:
        """Close the buffers and (unless ``keep_data``) delete the sample files that came through this run."""
        self.stop()
        if self._gc_thread is not None:
            self._gc_thread.join(timeout=5)
        with self._buffer_lock:
            buffer_ids = list(self._replay_buffers)
        for buffer_id in buffer_ids:
            self.close_buffer(buffer_id)
        if not keep_data:
            self.collect_data_garbage(min_age=0.0)

    def stale_removed(self) -> int:
        """Samples the buffers dropped as too old, closed buffers included."""
        with self._buffer_lock:
            buffers = list(self._replay_buffers.values())
        with self._stats_lock:
            closed = self.buffer_stale_removed
        return closed + sum(int(getattr(b, 'staleness_remove_count', 0) or 0) for b in buffers)

    # ---- data in and out ---------------------------------------------------------------------------
    def push(self, task_id: str, buffer_id: str, data: list[dict]) -> None:
        """Push the sample metadata of one collector answer into its learner task's buffer."""
        names = set()
        for d in data:  # data ids come over the network: only well-formed plain file names touch the disk
            try:
                names.add(split_data_id(str(d.get('data_id', '')))[0])
            except ValueError:
                pass
        buffer = self.buffer(buffer_id)
        if buffer is None:
            # An answer that arrives after its buffer closed (e.g. at the end of the run): nothing will ever
            # read these samples, so their files go now rather than outliving the run.
            self._error(f'collector task {task_id}: no replay buffer {buffer_id}, {len(data)} samples dropped')
            for name in names:
                self._remove_data_file(name)
            return
        if not data:
            return
        buffer.push(data, cur_collector_envstep=-1)
        with self._stats_lock:
            self.pushed_samples += len(data)
            self._data_files.update(names)
        self.notify()

    def sample(self, buffer_id: str, batch_size: int, cur_learner_iter: int) -> list[dict] | None:
        """``batch_size`` metadata for the learner (stale ones filtered by the buffer), or None if too few yet."""
        buffer = self.buffer(buffer_id)
        if buffer is None or self.paused:  # paused: the learner waits for data, i.e. between iterations
            return None
        data = buffer.sample(batch_size, cur_learner_iter)
        if data is not None:
            with self._stats_lock:
                self.sampled_batches += 1
            self._learner_starving = False
        elif not self._learner_starving:
            # Pacing must not hold collectors back while the learner has nothing to train on.
            self._learner_starving = True
            self.notify()
        return data

    def update_priority(self, buffer_id: str, priority_info: Any) -> None:
        buffer = self.buffer(buffer_id)
        if buffer is not None:
            buffer.update(priority_info)

    def buffer_size(self, buffer_id: str) -> int:
        buffer = self.buffer(buffer_id)
        return buffer.count() if buffer is not None else 0

    # ---- waiting and pacing ------------------------------------------------------------------------
    def notify(self) -> None:
        """Wake whoever waits for data or for the collect budget (data came, the learner advanced, ...)."""
        with self._data_arrived:
            self._data_arrived.notify_all()

    def wait_for_data(self, timeout: float) -> None:
        """Block until a collector pushes data (or ``timeout`` passes, or the run ends)."""
        with self._data_arrived:
            if not self._stopped.is_set():
                self._data_arrived.wait(timeout)

    def collect_budget_open(self) -> bool:
        """Whether collectors may hand over more samples now (see ``max_samples_per_iter``)."""
        if self.paused:
            return False
        if self.max_samples_per_iter is None or self._learner_starving:
            return True
        return self.pushed_samples < self.budget(self._train_iter())

    def budget(self, train_iter: int) -> float:
        """How many samples collectors may have pushed in all by learner iteration ``train_iter`` (pacing)."""
        return self.pacing_warmup + (self.max_samples_per_iter or 0.0) * train_iter

    def wait_collect_budget(self, timeout: float = 0.25) -> bool:
        """Wait (at most ``timeout`` s) until collectors may hand over more samples; returns whether they may."""
        if self.collect_budget_open():
            return True
        with self._data_arrived:
            if not self._stopped.is_set():
                self._data_arrived.wait(timeout)
        return self.collect_budget_open()

    def set_max_samples_per_iter(self, value: float) -> None:
        """Pacing from now on: the budget open at this moment stays open (no burst, no stall)."""
        with self._data_arrived:
            old, self.max_samples_per_iter = self.max_samples_per_iter, float(value)
            self.pacing_warmup += ((old or 0.0) - self.max_samples_per_iter) * self._train_iter()
            self._data_arrived.notify_all()

    # ---- sample files ------------------------------------------------------------------------------
    def _data_gc_loop(self) -> None:
        while not self._stopped.wait(self._gc_interval):
            self.collect_data_garbage(self._gc_min_age)

    def collect_data_garbage(self, min_age: float) -> int:
        """Delete sample files no replay buffer refers to and older than ``min_age`` s; return how many."""
        with self._buffer_lock:
            buffers = list(self._replay_buffers.values())
        referenced = set()
        for buffer in buffers:
            # stored_data(): the built-in buffers list their samples without building a state dict (whose
            # tensors would import torch here); other buffers give them through state_dict()
            stored = buffer.stored_data() if hasattr(buffer, 'stored_data') else buffer.state_dict().get('data', [])
            for item in stored:
                if item is not None and 'data_id' in item:
                    try:
                        referenced.add(split_data_id(item['data_id'])[0])
                    except ValueError:
                        pass
        now, removed = time.time(), 0
        with self._stats_lock:
            # Only files whose samples came through this coordinator: path_data may be shared.
            candidates = [n for n in self._data_files if n not in referenced]
        for name in candidates:
            path = os.path.join(self._path_data, name)
            try:
                if now - os.path.getmtime(path) < min_age:
                    continue
            except OSError:
                pass
            removed += self._remove_data_file(name)
        if removed:
            self._info(f'removed {removed} sample files no buffer refers to')
        return removed

    def _remove_data_file(self, name: str) -> int:
        """Delete one sample file and its manifest; 1 if it is gone now, 0 if it could not be removed."""
        path = os.path.join(self._path_data, name)
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError:  # the next garbage round tries again
            return 0
        with self._stats_lock:
            self._data_files.discard(name)
        try:
            os.remove(manifest_path(path))
        except OSError:
            pass
        return 1
