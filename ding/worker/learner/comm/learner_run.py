"""One learner task of the flask_fs comm learner (``LearnerRun``) and what goes through its queues: data
demands, batches built ahead (``Prepared``), learn infos grouped for one hand-over (``InfoGroup``), the
marker of a demand issued (``Demanded``), and the length-one learn-info mailbox (``InfoMailbox``)."""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import Any

from ding.utils.atomic_file import STORAGE_REFUSAL
from ding.utils.file_transport import SampleReader
from ding.utils.learn_task_layout import COLUMNS_LAYOUT
from ding.worker.learner.hook_base import iterations_done

from .learn_task_data import DataIdRows, data_id_bound, demand_fields

# How often a stop looks whether the learner thread ended (seconds).
_POLL_S = 0.05
# How long a data-parallel close waits for a learner that has trained every batch it holds (seconds).
_IDLE_S = 0.5


class InfoGroup:
    """Several learn infos put into the learn-info queue as one item (``num_batches`` runs, see
    ``LearnTaskExchange.hand_over_info``): one hand-over between the learner thread and the learn
    task's thread per group instead of one per iteration."""

    __slots__ = ('items',)

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items


class Prepared:
    """A batch built ahead, with the rest of its learn task (``BatchLoader.load_group``): what
    ``BatchLoader.load_batch`` returns for it."""

    __slots__ = ('loaded',)

    def __init__(self, loaded: tuple[Any, list[Any], int, int]) -> None:
        self.loaded = loaded


class Demanded:
    """Put into the learn-info queue when the ``seq``-th ``num_batches`` demand of a run is issued.

    A learn task that serves demand ``s`` may answer before all its batches trained only once it sees a
    marker with ``seq > s``: the learner cannot finish without that later demand's batches, so the learn
    task that brings them is still to come and carries the remaining infos. The marker of the served
    demand itself (or of none) says nothing of the kind: after the run's last demand, the learn task must
    wait for every learn info it owes, even when the learner ends meanwhile.
    """

    __slots__ = ('seq',)

    def __init__(self, seq: int) -> None:
        self.seq = seq


class InfoMailbox:
    """The learn-info queue between the learner / data loader threads and the learn task's thread: length one,
    like the demand and result queues. Its one item is the list of everything handed over since a learn task
    last took it (learn infos, rejections, ``InfoGroup`` and ``Demanded`` items, in order): a hand-over never
    waits for a learn task, and a learn task that takes more than it answers puts the rest back in front."""

    def __init__(self) -> None:
        self._queue: queue.Queue[list[Any]] = queue.Queue(maxsize=1)
        self._lock = threading.Lock()  # one hand-over at a time: take what is waiting, put back the longer list

    @property
    def maxsize(self) -> int:
        return self._queue.maxsize

    def post(self, items: list[Any], front: bool = False) -> None:
        """Hand ``items`` over after (``front``: before) what is waiting; never blocks."""
        if not items:
            return
        with self._lock:
            try:
                waiting = self._queue.get_nowait()
            except queue.Empty:
                waiting = []
            self._queue.put_nowait(list(items) + waiting if front else waiting + list(items))

    def take(self, timeout: float) -> list[Any]:
        """Everything handed over so far; raises ``queue.Empty`` after ``timeout`` seconds with nothing."""
        return self._queue.get(timeout=timeout)

    def take_nowait(self) -> list[Any]:
        return self._queue.get_nowait()

    def clear(self) -> None:
        with self._lock:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                pass


class LearnerRun:
    """One learner task: its learner and thread, and what the comm learner tracks about it."""

    def __init__(
        self,
        task_id: str,
        learner: Any,
        policy_name: str,
        path_policy: str,
        path_data: str,
        max_staleness: float,
        comm_batches: int = 1,
        policy_cfg: dict[str, Any] | None = None,
    ) -> None:
        self.task_id = task_id
        self.learner = learner
        self.policy_name = policy_name
        self.path_policy = path_policy
        self.reader = SampleReader(path_data)
        policy_cfg = policy_cfg or {}
        self.data_ids = DataIdRows(data_id_bound(policy_cfg))  # the data loader's parsed data ids
        self.fields = demand_fields(policy_cfg)  # the metadata fields its demands ask for
        self.max_staleness = max_staleness
        # Batches asked for per data demand (``num_batches``): one HTTP round trip serves that many iterations.
        self.comm_batches = comm_batches
        self.pending: deque[Any] = deque()  # batches of metadata received, not yet handed to the learner
        self.owed = 0  # learn infos / rejections still owed to learn tasks (num_batches demands)
        self.demand_out = False  # a num_batches demand was issued and its batches have not arrived yet
        self.demands_issued = 0  # num_batches demands issued so far (the seq of the latest one)
        self.starved_s = 0.0  # time the data loader waited with no batch left (num_batches demands)
        self.thread: threading.Thread | None = None
        self.ending = threading.Event()  # set: nothing may block on this run's queues any more
        self.finished = threading.Event()  # set: the learner thread ended and the learner is closed
        self.published = threading.Event()  # set: the weights were published once (before_run)
        self.group: Any = None  # the data-parallel group of this task (``DistSettings``), None when it trains alone
        # A data-parallel close: the learner stops once this many iterations are done (every rank at the same one)
        self.stop_iter: int | None = None
        self.publish_skipped = False  # SendPolicyHook skipped weights since the last ones were submitted
        self.publish_error: str | None = None  # why the last policy file could not be written (logged once)
        # A checkpoint or policy file the disk refused (the path and what was not saved): the task ends with it
        self.storage_error: str | None = None
        # Learn infos of a num_batches run not handed to the learn task yet, and whether the next one goes at
        # once (a learn task that saw a later demand waits for its first info to answer)
        self.info_group: list[dict[str, Any]] = []
        self.info_lock = threading.Lock()
        self.info_now = True
        self.reason = ''
        self.error: str | None = None
        self.outstanding_demand: dict[str, Any] | None = None
        # (policy_iter of each trained sample, stale dropped, unreadable) per batch handed to the learner, in
        # training order: the learner trains batches in the order get_data returns them.
        self.batch_stats: deque[tuple[list[int], int, int]] = deque()
        self.bad_files: dict[str, str] = {}  # corrupt file name -> why (never read again this run)
        # A RemoteReplayBuffer when the policy config names a replay_address: the batches come from the replay
        # service (the coordinator's learn tasks carry tickets) and the priorities go back there.
        self.replay: Any = None
        self.logged_files: set[str] = set()  # unreadable file names already logged
        self.learn_infos = 0
        self.rejected_batches = 0
        self.carried_stale = 0  # stale / unreadable samples of rejected batches, not reported yet
        self.carried_unreadable = 0
        # Where the time of a data round goes (logged when the run ends): inside get-data / learn tasks
        # (waiting for the learner) versus between them (the coordinator and the HTTP hops).
        self.in_tasks_s = 0.0
        self.between_tasks_s = 0.0
        self.last_task_end: float | None = None
        # (wall clock, process CPU time) when the first and the latest learn info of the run were sent: the
        # run's end log reports the iterations between them with the wall time and the CPU time of this whole
        # process (every thread: training, data loading, HTTP tasks, policy files), which benchmarks read.
        self.first_info_clock: tuple[float, float, float] | None = None
        self.last_info_clock: tuple[float, float, float] | None = None  # wall, process, thread CPU
        # Which iteration a requested batch will train at, known without racing the learner thread:
        # batches handed to the learner minus batches trained are still to come before it.
        self._iter_lock = threading.Lock()
        self.start_iter = learner.train_iter
        self.trained_version: int | None = None  # learner iteration that trained the last reported batch
        self.batches_handed = 0
        self.trained_batches = 0

    @property
    def publishes(self) -> bool:
        """Whether this task publishes the policy file (rank 0 of a data-parallel group, or a task alone)."""
        return self.group is None or self.group.rank == 0

    def take_info_group(self, ask_now: bool = False) -> list[dict[str, Any]]:
        """The learn infos grouped so far (see ``LearnTaskExchange.hand_over_info``), leaving none;
        ``ask_now``: the next info goes to the learn tasks at once (a learn task may wait for its first)."""
        with self.info_lock:
            group, self.info_group = self.info_group, []
            self.info_now = ask_now
        return group

    def group_info(self, info: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Add one learn info to the group; the group to hand over now, or None while it keeps growing (see
        ``LearnTaskExchange.hand_over_info``)."""
        with self.info_lock:
            self.info_group.append(info)
            if not (self.info_now or info['learner_done'] or len(self.info_group) >= self.comm_batches):
                return None
            group, self.info_group = self.info_group, []
            self.info_now = False
        return group

    def next_batch_iter(self) -> int:
        """The learner iteration at which the next batch handed over will be trained."""
        with self._iter_lock:
            base = self.start_iter if self.trained_version is None else self.trained_version + 1
            return base + self.batches_handed - self.trained_batches

    def batch_handed(self) -> None:
        with self._iter_lock:
            self.batches_handed += 1

    def batch_trained(self, version: int) -> tuple[int, int]:
        """Count a trained batch; returns (and clears) the stale / unreadable counts of rejected batches."""
        with self._iter_lock:
            self.trained_version = version
            self.trained_batches += 1
            carried = self.carried_stale, self.carried_unreadable
            self.carried_stale = self.carried_unreadable = 0
            return carried

    def batch_rejected(self, stale: int, unreadable: int) -> None:
        with self._iter_lock:
            self.rejected_batches += 1
            self.carried_stale += stale
            self.carried_unreadable += unreadable

    def task_began(self) -> float:
        now = time.perf_counter()
        if self.last_task_end is not None:
            self.between_tasks_s += now - self.last_task_end
        return now

    def task_ended(self, began: float) -> None:
        self.last_task_end = time.perf_counter()
        self.in_tasks_s += self.last_task_end - began

    def stop(self, reason: str, timeout: float) -> bool:
        """Stop the learner after its current iteration and wait up to ``timeout`` seconds for its thread (not
        from the thread itself); False if it is still running then."""
        if self.finished.is_set():
            return True
        if not self.reason:
            self.reason = reason
        self.ending.set()
        self.learner.stop()
        thread = self.thread
        if thread is None or thread is threading.current_thread():
            return True
        deadline = time.monotonic() + timeout
        while thread.is_alive() and time.monotonic() < deadline:
            self.learner.stop()  # again: a learner that was just starting clears the flag
            thread.join(_POLL_S)
        return not thread.is_alive()

    def stop_at(self, stop_iter: int, reason: str, timeout: float) -> bool:
        """Stop once ``stop_iter`` iterations are done (``iterations_done``: the batches it was given, equal on
        every rank of a group, so every rank stops after the same iteration and none waits in a collective
        for a rank that left); waits up to ``timeout`` seconds like ``stop``."""
        deadline = time.monotonic() + timeout
        self.stop_iter = int(stop_iter)
        idle_since: float | None = None
        while not self.finished.is_set() and iterations_done(self.learner) < self.stop_iter:
            now = time.monotonic()
            if now >= deadline:
                break
            # A learn task the coordinator counted but that never arrived: the learner trained all it was
            # handed and waits for data; after a moment it cannot reach the target any more.
            if self.pending or iterations_done(self.learner) < self.start_iter + self.batches_handed:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= _IDLE_S:
                break
            time.sleep(_POLL_S)
        return self.stop(reason, max(0.0, deadline - time.monotonic()))

    def reached_stop_iter(self) -> bool:
        """After an iteration (training thread): whether a ``stop_at`` target is reached; the learner then
        stops before asking for another batch."""
        if self.stop_iter is not None and iterations_done(self.learner) >= self.stop_iter:
            self.learner.stop()
            return True
        return False

    def storage_failed(self, message: str) -> None:
        """A file of this run could not be written (``message`` names it and what was not saved): the learner
        stops after its current iteration and the coordinator's next task hears why (``refusal``)."""
        if self.storage_error is None:
            self.storage_error = message
        self.learner.stop()

    def refusal(self) -> dict[str, Any]:
        """The fields a failed task of this run carries: the storage flag when the disk refused a file (a retry
        would write to the same place; the coordinator ends the run), else none."""
        return {STORAGE_REFUSAL: True} if self.storage_error else {}

    def end_report(self) -> str:
        """The log line of a run that ended: how it ended, what it sent, where the time of a data round went."""
        rounds = max(self.learn_infos + self.rejected_batches, 1)
        rates = ''
        first, last = self.first_info_clock, self.last_info_clock
        if first is not None and last is not None and self.learn_infos > 1:
            wall, cpu, training = (b - a for a, b in zip(first, last))
            rates = (
                f'; from the first learn info to the last: {self.learn_infos - 1} iterations in '
                f'{wall:.2f}s wall, {cpu:.2f}s process CPU ({training:.2f}s of it in the training thread)'
            )
        return (
            f'learner task {self.task_id} ended ({self._why()}) at '
            f'iteration {self.learner.train_iter}: {self.learn_infos} learn infos sent, '
            f'{self.rejected_batches} batches rejected; per data round '
            f'{1e3 * self.in_tasks_s / rounds:.1f} ms in get-data/learn tasks, '
            f'{1e3 * self.between_tasks_s / rounds:.1f} ms between them (coordinator side); '
            f'{self.starved_s:.2f}s waiting with no batch received{rates}'
        )

    def ended_message(self, what: str) -> str:
        if self.storage_error:  # the coordinator ends the run with this line: the file and what was not saved first
            return f'{what}: stopped after {iterations_done(self.learner)} iterations: {self.storage_error}'
        return (
            f'{what}: learner task {self.task_id} has ended ({self._why()}) after '
            f'{iterations_done(self.learner)} iterations'
        )

    def _why(self) -> str:
        if self.storage_error:  # the cause, even when the learner then stopped in an orderly way
            return 'failed: ' + self.storage_error
        return self.reason or ('failed: ' + self.error if self.error else 'ended')


def make_demand(
    run: LearnerRun, batch_size: int, cur_learner_iter: int, num_batches: int | None = None
) -> dict[str, Any]:
    """A data demand: its batch size, the iteration its (first) batch trains at, ``num_batches`` when the run
    asks for several per demand, and the opt-in to batches as columns of the fields the learner reads."""
    demand = {'batch_size': int(batch_size), 'cur_learner_iter': cur_learner_iter, 'task_id': run.task_id}
    if num_batches is not None:
        demand['num_batches'] = num_batches
    demand['fields'] = run.fields
    demand['layout'] = COLUMNS_LAYOUT
    return demand
