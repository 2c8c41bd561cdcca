"""``FlaskFileSystemLearner``: a comm learner served over HTTP (``ding.interaction``) that moves data and
weights through a shared directory (``ding.utils.file_transport``).

Threads and the three length-one queues (the coordinator drives everything, one task at a time)::

    coordinator --learner_get_data_task--> deal_with_get_data    <-- demand queue  <-- get_data (loader thread)
    coordinator --learner_learn_task-----> deal_with_learner_learn --> result queue --> get_data: read files,
                                                                                         return the batch
                                           deal_with_learner_learn <-- learn-info queue <-- SendLearnInfoHook
                                                                                         (learner thread)

The learner's ``AsyncDataLoader`` calls ``get_data`` again as soon as a batch is handed over, so the next
demand is already waiting while the current batch trains, and the learn info leaves before the slower
after-iteration hooks (policy file, log table, checkpoints) run; the policy file itself is written on a
publisher thread. Each learn task is answered with exactly one learn info: the one of the iteration that
trained its data. When every sample of a batch is unusable (unreadable file, or older than the learner
config's ``max_staleness``), no iteration trains on it: that learn task is answered with
``{'trained': False, 'infos': []}`` (no learn info) and the learner asks for data again.

With ``comm_batches`` k > 1 the demand carries ``num_batches: k``; its learn task brings k batches, which
``get_data`` hands over one per call, and is answered with ``{'infos': [...]}``: one learn info per batch
that trained (rejected batches add none), so the HTTP round trips cost once per k iterations. Such a learn
task is answered as soon as the learner has asked for the next k batches (its last batches may still be
training: their infos go with the next learn task), so the coordinator's round trip overlaps training;
the learn infos of a run stay exactly one per iteration, in order. The learn task of a run's last demand
(no later one follows to carry infos) waits for every info it owes, even when the learner ends meanwhile.

Every demand also opts in to batches as dicts of columns of the metadata fields the learner reads
(``'fields'``: those of ``METADATA_FIELDS`` its policy reads, see ``demand_fields``; ``'layout': 'columns'``,
see docs/parallel.md): less JSON to decode and no
per-sample dicts to walk. A coordinator that ignores the opt-in sends lists of dicts; both are accepted.
"""

from __future__ import annotations

import copy
import math
import os
import queue
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from easydict import EasyDict

from ding.interaction import CallbackSlave, TaskFail
from ding.utils.checkpoint import manifest_path
from ding.utils.file_transport import CheckpointError, SampleReader, load_policy, save_policy, split_data_id
from ding.utils.learn_task_layout import COLUMNS_LAYOUT
from ding.utils.log_helper import build_logger, close_logger
from ding.utils.registry import COMM_LEARNER_REGISTRY
from ding.worker.learner.learner_hook import iterations_done

from .base_comm_learner import BaseCommLearner
from .learn_task_data import (
    META_TO_SAMPLE,
    DataIdRows,
    as_columns,
    batch_size_of,
    data_id_bound,
    demand_fields,
    group_metadata,
    group_rows,
    grouped_order,
    learn_task_batches,
    metadata_columns,
    number_or_none,
    policy_iters,
    policy_versions,
    split_batch,
    split_data_ids,
    take,
)
from .utils import LearnInfoGate, SendLearnInfoHook, SendPolicyHook

# How often blocked queue operations wake up to see whether the learner task was closed (seconds).
_POLL_S = 0.05
# What send_learn_info itself writes into the learner's scalar log buffer.
_OWN_SCALARS = ('policy_lag_min', 'policy_lag_mean', 'policy_lag_max', 'stale_dropped')


class _Infos:
    """Several learn infos put into the learn-info queue as one item (``num_batches`` runs, see
    ``FlaskFileSystemLearner._hand_over_info``): one hand-over between the learner thread and the learn
    task's thread per group instead of one per iteration."""

    __slots__ = ('items',)

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items


class _Prepared:
    """A batch built ahead, with the rest of its learn task (``FlaskFileSystemLearner._load_group``): what
    ``_load_batch`` returns for it."""

    __slots__ = ('loaded',)

    def __init__(self, loaded: tuple[Any, list[Any], int, int]) -> None:
        self.loaded = loaded


class _Demanded:
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


class LearnerSlave(CallbackSlave):
    """The learner process's interaction slave: routes the coordinator's tasks to the comm learner.

    ``callback_fn`` maps ``deal_with_resource``, ``deal_with_learner_start``, ``deal_with_get_data``,
    ``deal_with_learner_learn`` and ``deal_with_learner_close`` to callables; ``deal_with_lost_master``
    (optional) is called when the coordinator disconnects or stops answering heartbeats.
    """

    TASKS = {
        'resource': 'deal_with_resource',
        'learner_start_task': 'deal_with_learner_start',
        'learner_get_data_task': 'deal_with_get_data',
        'learner_learn_task': 'deal_with_learner_learn',
        'learner_close_task': 'deal_with_learner_close',
    }
    ROLE = 'learner'

    def _process_task(self, task: dict[str, Any]) -> dict[str, Any]:
        name, fn = self._route(task)
        task_info = task.get('task_info') or {}
        if name == 'resource':
            return fn()
        if name == 'learner_learn_task':
            return fn(task_info, task.get('data'))
        return fn(task_info)

    def _lost_connection(self, master_address: str, err: Exception) -> None:
        self._lost_master(master_address, err)

    def _after_disconnection(
        self, status_code: int, success: bool, code: int, message: str, data: dict[str, Any]
    ) -> None:
        # A coordinator that disconnects has given up this worker's task (it fails and moves it).
        if success:
            self._lost_master('the coordinator', 'it disconnected')


class _PolicyPublisher:
    """Writes policy files on its own thread, newest first: while one write runs, newer weights replace the
    waiting ones (collectors want the latest, and the learner must not wait for the disk).

    ``min_interval``: seconds between the writes of one run. Collectors reload the file every few seconds
    (``update_policy_second``), so weights published many times a second are mostly never read, and each
    write costs a serialisation and a checksum; weights submitted meanwhile wait (the newest
    replacing older ones) until the interval has passed. A run's first weights, ``flush`` and ``close`` do
    not wait.
    """

    def __init__(self, write: Any, name: str, min_interval: float = 0.0) -> None:
        self._write = write
        self._min_interval = float(min_interval)
        self._cond = threading.Condition()
        self._pending: tuple[Any, dict[str, Any], int] | None = None
        self._busy = False
        self._stop = False
        self._flushing = 0
        self._last_run: Any = None  # run of the last write, and when the next may start
        self._next_write = 0.0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def due(self, run: Any) -> bool:
        """Whether weights submitted now would not have to wait for ``min_interval`` (read without the lock:
        a stale answer only moves one publish by one ``send_policy_freq``)."""
        return run is not self._last_run or time.monotonic() >= self._next_write

    def submit(self, run: Any, model: dict[str, Any], policy_iter: int) -> None:
        with self._cond:
            self._pending = (run, model, policy_iter)
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Write what is pending now (no interval) and wait until it is written; False on timeout."""
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Write what is pending, then stop the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _loop(self) -> None:
        cond = self._cond
        while True:
            with cond:
                cond.wait_for(lambda: self._pending is not None or self._stop)
                if self._pending is None:
                    return
                while not (self._stop or self._flushing or self._pending[0] is not self._last_run):
                    wait = self._next_write - time.monotonic()
                    if wait <= 0:
                        break
                    cond.wait(wait)
                job, self._pending, self._busy = self._pending, None, True
            try:
                self._write(*job)
            finally:
                with cond:
                    self._busy = False
                    self._last_run = job[0]
                    self._next_write = time.monotonic() + self._min_interval
                    cond.notify_all()


class _Run:
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
        self.publish_skipped = False  # SendPolicyHook skipped weights since the last ones were submitted
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
        self.logged_files: set = set()  # unreadable file names already logged
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

    def take_info_group(self, ask_now: bool = False) -> list[dict[str, Any]]:
        """The learn infos grouped so far (see ``FlaskFileSystemLearner._hand_over_info``), leaving none;
        ``ask_now``: the next info goes to the learn tasks at once (a learn task may wait for its first)."""
        with self.info_lock:
            group, self.info_group = self.info_group, []
            self.info_now = ask_now
        return group

    def group_info(self, info: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Add one learn info to the group; the group to hand over now, or None while it keeps growing (see
        ``FlaskFileSystemLearner._hand_over_info``)."""
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

    def ended_message(self, what: str) -> str:
        why = self.reason or ('failed: ' + self.error if self.error else 'ended')
        return f'{what}: learner task {self.task_id} has ended ({why}) after {iterations_done(self.learner)} iterations'


def _request_stop(learner: Any) -> None:
    # BaseLearner.start() leaves its loop after the current iteration once this flag is set (a batch must
    # still arrive: get_data then returns an empty one). BaseLearner has no public way to set it without
    # also closing the data loader and loggers under the running loop.
    learner._end_flag = True


def _stop_requested(learner: Any) -> bool:
    return bool(getattr(learner, '_end_flag', True))


def _demand(run: _Run, batch_size: int, cur_learner_iter: int, num_batches: int | None = None) -> dict[str, Any]:
    """A data demand: its batch size, the iteration its (first) batch trains at, ``num_batches`` when the run
    asks for several per demand, and the opt-in to batches as columns of the fields the learner reads."""
    demand = {'batch_size': int(batch_size), 'cur_learner_iter': cur_learner_iter, 'task_id': run.task_id}
    if num_batches is not None:
        demand['num_batches'] = num_batches
    demand['fields'] = run.fields
    demand['layout'] = COLUMNS_LAYOUT
    return demand


def _check_freq(freq: Any, what: str) -> int:
    if isinstance(freq, bool) or not isinstance(freq, int) or freq < 1:
        raise ValueError(f'{what} must be a positive integer, got {freq!r}')
    return freq


def _plain(value: Any) -> Any:
    """JSON-ready copy of priority info values (tensors / arrays / numpy scalars -> lists / numbers)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, 'tolist'):
        return value.tolist()
    return value


@COMM_LEARNER_REGISTRY.register('flask_fs')
class FlaskFileSystemLearner(BaseCommLearner):
    """Comm learner over HTTP (a :class:`LearnerSlave`) and a shared file system.

    Config (``system.learner.<name>`` of the parallel config): ``host``, ``port`` (0: a free one, see
    ``.port``), ``path_data`` / ``path_policy`` (defaults; a start task may name others), ``send_policy_freq``,
    ``send_policy_min_interval`` (seconds between two policy file writes, see ``_PolicyPublisher``; the
    weights published are never older than that plus one write), ``use_distributed`` (must be False), the
    slave's ``heartbeat_span``, ``request_retries``, ``request_retry_waiting``, ``request_timeout``,
    ``channel``, and ``load_workers`` (threads reading the sample files of a batch concurrently),
    ``stop_timeout`` (seconds a close waits for the learner thread).
    The learner config (from the start task) may hold ``max_staleness``: samples whose policy is more than
    that many iterations older than the learner are dropped (counted as ``stale_dropped``), and
    ``comm_batches`` (default: this config's): batches asked for per data demand (``num_batches``); its learn
    task then carries that many batches and is answered with ``{'infos': [...]}``, one learn info per trained
    batch, so one HTTP round trip serves that many iterations.

    Use: ``comm = create_comm_learner(cfg); comm.start()`` (returns once serving), then keep the process
    alive; ``comm.close()`` stops the running learner task and the server.
    """

    config = dict(
        type='flask_fs',
        import_names=['ding.worker.learner.comm.flask_fs_learner'],
        name='learner0',
        exp_name='default_experiment',
        host='127.0.0.1',
        port=None,
        path_data='./data',
        path_policy='./policy',
        send_policy_freq=1,
        send_policy_min_interval=0.2,
        use_distributed=False,
        heartbeat_span=3.0,
        request_retries=5,
        request_retry_waiting=1.0,
        request_timeout=10.0,
        channel=0,
        load_workers=4,
        stop_timeout=60.0,
        comm_batches=1,
    )

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def __init__(self, cfg: dict[str, Any]) -> None:
        merged = self.default_config()
        merged.update(copy.deepcopy(dict(cfg)))
        super().__init__(merged)
        cfg = self._cfg
        if cfg.use_distributed:
            raise ValueError(f"comm learner {cfg.name}: use_distributed=True is not supported by 'flask_fs'")
        self._send_policy_freq = _check_freq(cfg.send_policy_freq, f'comm learner {cfg.name}: send_policy_freq')
        interval = cfg.send_policy_min_interval
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 <= interval < math.inf:
            raise ValueError(
                f'comm learner {cfg.name}: send_policy_min_interval must be a number of seconds >= 0, got {interval!r}'
            )
        workers = cfg.load_workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f'comm learner {cfg.name}: load_workers must be a positive integer, got {workers!r}')

        self._data_demand_queue: queue.Queue = queue.Queue(maxsize=1)
        self._data_result_queue: queue.Queue = queue.Queue(maxsize=1)
        # Unbounded: with comm_batches > 1 a learn task may be answered before the last batches it brought
        # have trained, and the learner must not wait for the next learn task to hand over their infos.
        # (One learn info per batch handed over bounds it.)
        self._learn_info_queue: queue.Queue = queue.Queue()
        self._run: _Run | None = None
        self._lifecycle_lock = threading.RLock()  # start / close of learner tasks and of the comm learner
        self._slave: LearnerSlave | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._publisher: _PolicyPublisher | None = None
        self._logger = None
        self._closed = False
        self._service: Any = None  # ding.service.ServiceRuntime when the task's config enables the run service

    # ---- service -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the slave (returns once it listens); the learner itself starts with a start task."""
        if self._slave is not None:
            raise RuntimeError(f'comm learner {self._cfg.name}: start() was already called')
        cfg = self._cfg
        self._logger, _ = build_logger(f'./{cfg.exp_name}/log/comm_{cfg.name}', f'comm_{cfg.name}', need_tb=False)
        self._pool = ThreadPoolExecutor(max_workers=cfg.load_workers, thread_name_prefix=f'ding-{cfg.name}-read')
        self._publisher = _PolicyPublisher(
            self._write_policy, f'ding-{cfg.name}-publish', float(cfg.send_policy_min_interval)
        )
        callbacks = {
            'deal_with_resource': self.deal_with_resource,
            'deal_with_learner_start': self.deal_with_learner_start,
            'deal_with_get_data': self.deal_with_get_data,
            'deal_with_learner_learn': self.deal_with_learner_learn,
            'deal_with_learner_close': self.deal_with_learner_close,
            'deal_with_lost_master': self.deal_with_lost_master,
        }
        try:
            slave = LearnerSlave(
                cfg.host,
                cfg.port,
                callbacks,
                heartbeat_span=cfg.heartbeat_span,
                request_retries=cfg.request_retries,
                request_retry_waiting=cfg.request_retry_waiting,
                request_timeout=cfg.request_timeout,
                channel=cfg.channel,
            )
            slave.start()  # raises at once when the port is taken (the parallel worker retries elsewhere)
        except BaseException:
            self._pool.shutdown(wait=False)
            self._publisher.close()
            close_logger(self._logger)
            self._pool = self._publisher = self._logger = None
            raise
        self._slave = slave
        super().start()
        self._logger.info(f'comm learner {cfg.name} serving on {cfg.host}:{slave.port}')

    def close(self) -> None:
        """Stop the running learner task, then the slave. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._lifecycle_lock:
            run = self._run
            if run is not None:
                self._stop_run(run, 'the comm learner was closed')
        if self._slave is not None:
            self._slave.close()
        if self._service is not None:
            self._service.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._publisher is not None:
            self._publisher.close(timeout=float(self._cfg.stop_timeout))
        super().close()
        if self._logger is not None:
            self._logger.info(f'comm learner {self._cfg.name} closed')
            close_logger(self._logger)

    @property
    def port(self) -> int:
        """The port the slave listens on (the chosen one after ``start()`` with port 0)."""
        return self._slave.port if self._slave is not None else self._cfg.port

    @property
    def slave(self) -> LearnerSlave | None:
        return self._slave

    @property
    def learner(self) -> Any:
        """The ``BaseLearner`` of the current (or last) learner task, None before the first one."""
        run = self._run
        return run.learner if run is not None else None

    @property
    def hooks4call(self) -> list[Any]:
        gate = LearnInfoGate()
        return [
            # After load_ckpt (priority 20): collectors start from the weights the learner really has.
            SendPolicyHook('send_policy_before_run', 100, position='before_run', ext_args=EasyDict(freq=1)),
            SendPolicyHook('send_policy', 100, position='after_iter', ext_args=EasyDict(freq=self._send_policy_freq)),
            SendLearnInfoHook('send_learn_info_mark', 0, position='before_iter', ext_args=EasyDict(gate=gate)),
            # Before log_show (20), which clears the log buffer the learn info reads, and before the
            # policy file and checkpoints: the coordinator gets the answer as early as possible.
            SendLearnInfoHook('send_learn_info', 15, position='after_iter', ext_args=EasyDict(gate=gate)),
        ]

    # ---- queue helpers -------------------------------------------------------------------------------
    @staticmethod
    def _put(q: queue.Queue, item: Any, run: _Run) -> bool:
        """Put into a length-one queue; False if the run ended first."""
        while not run.ending.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    @staticmethod
    def _get(q: queue.Queue, run: _Run) -> Any:
        """Take from a length-one queue; None if the run ended first (an item put just before still counts)."""
        while True:
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                if run.ending.is_set():
                    try:
                        return q.get_nowait()
                    except queue.Empty:
                        return None

    def _drain_queues(self) -> None:
        for q in (self._data_demand_queue, self._data_result_queue, self._learn_info_queue):
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break

    # ---- learner side (learner / data loader threads) ------------------------------------------------
    def get_data(self, batch_size: int) -> Any:
        """Ask the coordinator for a batch and return it, read from ``path_data`` (a collated dict, or a list of
        sample dicts where the files do not stack, see ``_load_batch``).

        Puts the demand ``{'batch_size', 'cur_learner_iter', 'task_id', 'fields', 'layout'}`` into the demand
        queue (see ``_demand``), waits for the metadata, reads the files. A batch without one usable sample
        answers its learn task with no learn info and asks again. Once the run is ending it returns ``[]`` (the
        learner then stops) or None (no data).
        """
        run = self._run
        if run is None:
            return []
        # The policy's batch_size, not the loader's: a run-control tune of batch_size takes effect here.
        batch_size = run.learner.policy.get_attribute('batch_size')
        while not run.ending.is_set():
            if run.comm_batches > 1:
                metadata = self._next_of_group(run, batch_size)
                if metadata is None:
                    break
            else:
                if run.batches_handed >= run.learner.cfg.train_iterations:
                    # The learner needs no more batches this run: no demand, just wait for it to end.
                    run.ending.wait()
                    break
                demand = _demand(run, batch_size, run.next_batch_iter())
                if not self._put(self._data_demand_queue, demand, run):
                    break
                metadata = self._get(self._data_result_queue, run)
                if metadata is None:
                    break
            if metadata.__class__ is _Prepared:
                batch, versions, stale, unreadable = metadata.loaded
            else:
                batch, versions, stale, unreadable = self._load_batch(run, metadata)
            if batch:
                run.batch_stats.append((versions, stale, unreadable))
                run.batch_handed()
                return batch
            # No iteration trains on this batch, so its learn task carries no learn info (``infos`` is empty);
            # the counts reach the coordinator with the next learn info.
            run.batch_rejected(stale, unreadable)
            message = (
                f'all {batch_size_of(metadata)} samples of the batch were rejected (stale: {stale}, '
                f'unreadable: {unreadable}); asking for new data'
            )
            self._logger.warning(f'learner task {run.task_id}: {message}')
            self._put(
                self._learn_info_queue, {'task_id': run.task_id, 'trained': False, 'infos': [], 'message': message}, run
            )
        # Ending: an empty batch lets the learner's loop see its stop flag; until that flag is set (start()
        # clears it when it begins) answer "no data yet" so the learner never trains on an empty batch.
        return [] if _stop_requested(run.learner) else None

    def _next_of_group(self, run: _Run, batch_size: int) -> Any:
        """The next batch's metadata with ``num_batches`` demands (None: the run ends, or needs no more data).

        The demand for the next group goes out as soon as fewer than ``comm_batches`` batches are left, so
        one group is on its way while the current one trains and the learner does not wait for the round trip.
        """
        while not run.ending.is_set():
            if run.demand_out:
                if run.pending:  # batches left to hand over: just look whether the next group is in
                    try:
                        received = self._data_result_queue.get_nowait()
                    except queue.Empty:
                        received = None
                else:
                    waited = time.perf_counter()
                    received = self._get(self._data_result_queue, run)
                    run.starved_s += time.perf_counter() - waited
                    if received is None:
                        return None
                if received is not None:
                    run.pending.extend(self._load_group(run, received))
                    run.demand_out = False
            if not run.demand_out and len(run.pending) < 2 * run.comm_batches:
                wanted = run.learner.cfg.train_iterations - run.batches_handed - len(run.pending)
                if wanted > 0:
                    demand = _demand(
                        run,
                        batch_size,
                        run.next_batch_iter() + len(run.pending),
                        num_batches=min(run.comm_batches, wanted),
                    )
                    # Counted before the demand is visible: its learn task reads the count as its own seq.
                    run.demands_issued += 1
                    if not self._put(self._data_demand_queue, demand, run):
                        return None
                    run.demand_out = True
                    group = run.take_info_group(ask_now=True)
                    if group:
                        self._learn_info_queue.put(_Infos(group))
                    self._learn_info_queue.put(_Demanded(run.demands_issued))
            if run.pending:
                return run.pending.popleft()
            if not run.demand_out:
                # The learner needs no more batches this run: no demand, just wait for it to end.
                run.ending.wait()
                return None
        return None

    def _load_batch(self, run: _Run, metadata: Any) -> tuple[Any, list[int], int, int]:
        """(batch, policy_iter of each sample, stale dropped, unreadable): drop stale samples, load the files of
        the rest (uncached ones concurrently), then build the batch.

        ``metadata`` is a dict of columns (the demand's ``layout``) or a list of sample dicts. The batch is
        collated here, column by column from the cached files (``SampleReader.gather``): a dict of batched
        tensors, what the policy would make of the list of sample dicts, at a fraction of the cost. Where the
        files do not allow that, it is the list of sample dicts, as the policy also accepts. Either way the
        replay buffer's fields of the metadata (``META_TO_SAMPLE``) are part of each sample. Samples are
        grouped by file (files in order of first use).
        """
        columns = as_columns(metadata)
        positions, stale = self._fresh_positions(run, columns)
        if not columns['data_id'] or (positions is not None and not positions):
            return [], [], stale, 0
        reader = run.reader
        unreadable = 0
        gathered = None
        located = self._rows_in_cached_files(run, columns, positions)
        if located is not None:
            try:
                gathered = reader.gather(located[0])
            except Exception:  # e.g. an index beyond its file: the checks below find the sample and log it
                located = None
        if located is None:
            rows, kept, unreadable = self._checked_rows(run, columns, positions)
            if not rows:
                return [], [], stale, unreadable
            try:
                gathered = reader.gather(rows)
            except Exception:  # e.g. a file evicted and gone since it was checked: read the samples one by one
                gathered = None
        else:
            rows, kept = located

        batch = None
        if gathered is not None:
            meta = metadata_columns(columns, kept)
            if meta is not None:
                gathered.update(meta)
                batch = gathered
        if batch is None:
            batch, failed = self._read_one_by_one(run, rows, columns, kept)
            unreadable += failed
        return batch, policy_iters(batch), stale, unreadable

    def _load_group(self, run: _Run, batches: list[Any]) -> list[Any]:
        """A learn task's batches (``num_batches`` runs), built all at once where that gives what ``_load_batch``
        gives for each (the usual case: columns of well-formed data ids of files that load, no staleness
        bound): one data-id split, one ``gather`` and one metadata collation for the task instead of one per
        batch, so the data loader runs once per learn task rather than once per iteration. The batches come
        back as ``_Prepared`` (views of the task's tensors); otherwise as received, each built when handed over
        (which also finds, logs and counts what is wrong with them).
        """
        if run.max_staleness != math.inf or len(batches) < 2:
            return batches  # staleness is judged against the learner's iteration when a batch is handed over
        rows = group_rows(batches, run.data_ids)
        if rows is None:
            return batches
        files, which, indices, sizes, order = rows
        if run.bad_files and not run.bad_files.keys().isdisjoint(files):
            return batches
        meta = group_metadata(batches, order)
        if meta is None or not self._load_files(run, files):
            return batches
        try:
            gathered = run.reader.gather_indexed(files, which, indices)
        except Exception:  # e.g. an index beyond its file
            return batches
        if gathered is None:
            return batches
        gathered.update(meta)
        return [_Prepared((batch, policy_iters(batch), 0, 0)) for batch in split_batch(gathered, sizes)]

    def _load_files(self, run: _Run, files: list[str]) -> bool:
        """Load the files not cached yet (concurrently on the read pool); False if one does not load."""
        reader = run.reader
        uncached = [name for name in files if not reader.cached(name)]
        try:
            if self._pool is not None and len(uncached) > 1:
                list(self._pool.map(reader.num_samples, uncached))
            else:
                for name in uncached:
                    reader.num_samples(name)
        except Exception:  # unreadable, or not a sample file: _load_batch logs and counts it
            return False
        return True

    @staticmethod
    def _fresh_positions(run: _Run, columns: dict[str, list[Any]]) -> tuple[list[int] | None, int]:
        """Positions of the samples at most ``max_staleness`` iterations older than the learner (None: all of
        them), and how many were dropped. A sample without a policy version is never stale."""
        bound = run.max_staleness
        if bound == math.inf:
            return None, 0
        versions = policy_versions(columns, len(columns['data_id']))
        too_old = (run.next_batch_iter() - versions) > bound  # NaN compares False: kept
        stale = int(np.count_nonzero(too_old))
        return (np.flatnonzero(~too_old).tolist() if stale else None), stale

    @staticmethod
    def _rows_in_cached_files(
        run: _Run, columns: dict[str, list[Any]], positions: list[int] | None
    ) -> tuple[list[tuple[str, int]], Any] | None:
        """``(rows, positions of their samples)`` without a check per file, when every data id is well formed
        and names a cached file not known to be bad: the usual case once the reader's cache is warm. None
        otherwise (``_checked_rows`` reads, checks and logs). An index beyond its file makes ``gather`` raise."""
        split = split_data_ids(take(columns['data_id'], positions))
        if split is None:
            return None
        names, indices, files = split
        if run.bad_files and not run.bad_files.keys().isdisjoint(files):
            return None
        if not all(map(run.reader.cached, files)):
            return None
        order = grouped_order(names, files)
        if order is not None:
            names, indices = take(names, order), take(indices, order)
            positions = take(positions, order) if positions is not None else order
        return list(zip(names, indices)), positions

    def _checked_rows(
        self, run: _Run, columns: dict[str, list[Any]], positions: list[int] | None
    ) -> tuple[list[tuple[str, int]], list[int], int]:
        """``(rows, positions of their samples, unreadable)``: the samples whose files load and hold them,
        grouped by file. Malformed data ids and unreadable files are logged (a file once), corrupt files
        remembered in ``run.bad_files``."""
        data_ids = columns['data_id']
        # file name -> (positions in the columns, sample indices in the file)
        groups: dict[str, tuple[list[int], list[int]]] = {}
        unreadable = 0
        for i in range(len(data_ids)) if positions is None else positions:
            try:
                name, index = split_data_id(data_ids[i])
            except ValueError as exc:
                unreadable += 1
                self._logger.warning(f'learner task {run.task_id}: sample skipped: {exc}')
                continue
            if name in run.bad_files:
                unreadable += 1
                continue
            group = groups.get(name)
            if group is None:
                groups[name] = group = ([], [])
            group[0].append(i)
            group[1].append(index)

        # Only files that are not cached yet go to the read pool (disk reads overlap); a cached file is a
        # dictionary lookup, cheaper done here than handed to another thread.
        reader = run.reader
        uncached = [name for name in groups if not reader.cached(name)] if self._pool is not None else []
        futures = (
            {name: self._pool.submit(self._check_group, run, name, *groups[name]) for name in uncached}
            if len(uncached) > 1
            else {}
        )
        results = [
            (name, futures[name].result() if name in futures else self._check_group(run, name, *group))
            for name, group in groups.items()
        ]

        rows: list[tuple[str, int]] = []  # (file, index) of each sample to train on
        kept: list[int] = []  # ... and its position in the columns
        for name, (valid, error) in results:
            if error is not None:
                n = len(groups[name][0])
                unreadable += n
                path = os.path.join(reader.path_data, name)
                # A corrupt file stays corrupt; a missing one may still show up (a slow shared file system).
                if os.path.exists(path):
                    run.bad_files[name] = error
                if name not in run.logged_files:
                    run.logged_files.add(name)
                    self._logger.warning(
                        f'learner task {run.task_id}: skipped {n} sample(s) of unreadable file {path}: {error}'
                    )
                continue
            unreadable += len(groups[name][0]) - len(valid)
            for i, index in valid:
                rows.append((name, index))
                kept.append(i)
        return rows, kept, unreadable

    def _read_one_by_one(
        self, run: _Run, rows: list[tuple[str, int]], columns: dict[str, list[Any]], positions: list[int] | None
    ) -> tuple[list[dict[str, Any]], int]:
        """The batch as a list of sample dicts (files that ``gather`` cannot collate), each with its metadata
        fields of ``META_TO_SAMPLE``; and how many samples could not be read."""
        meta = [(key, columns[key]) for key in META_TO_SAMPLE if columns.get(key) is not None]
        batch, failed = [], 0
        for (name, index), i in zip(rows, range(len(rows)) if positions is None else positions):
            try:  # a new dict: the fields may be added
                sample = run.reader.read_file_samples(name, [index])[0]
            except Exception as exc:  # evicted from the cache since, and gone or damaged on disk
                failed += 1
                self._logger.warning(f"learner task {run.task_id}: sample '{name}#{index}' skipped: {exc}")
                continue
            for key, column in meta:
                if column[i] is not None:
                    sample[key] = column[i]
            batch.append(sample)
        return batch, failed

    def _check_group(
        self, run: _Run, name: str, positions: list[int], indices: list[int]
    ) -> tuple[list[tuple[int, int]], str | None]:
        """Load file ``name`` (into the reader's cache) and check the sample ``indices``:
        ``([(position, index) of each sample it holds], None)``, or ``([], why)`` if the file is bad."""
        try:
            n = run.reader.num_samples(name)
        except CheckpointError as exc:
            return [], str(exc)
        except Exception as exc:  # a file that verifies but is not a sample file
            return [], f'{type(exc).__name__}: {exc}'
        valid = []
        for position, index in zip(positions, indices):
            if index < n:
                valid.append((position, index))
            else:
                self._logger.warning(
                    f"learner task {run.task_id}: sample skipped: data_id '{name}#{index}' is "
                    f'beyond the samples of its file'
                )
        return valid, None

    def policy_publish_due(self) -> bool:
        """Whether ``send_policy`` would write the weights without waiting for ``send_policy_min_interval``;
        if not, ``SendPolicyHook`` skips building and snapshotting a state dict that would only be replaced
        (and the run's last weights are published when it ends)."""
        run = self._run
        if run is None:
            return False
        due = self._publisher.due(run)
        if not due:
            run.publish_skipped = True
        return due

    def send_policy(self, state_dict: dict[str, Any]) -> None:
        """Publish ``{'model', 'iter'}`` as ``{path_policy}/{policy_name}.safetensors`` (called by SendPolicyHook).

        The learner thread only snapshots the weights; the write happens on the publisher thread.
        """
        run = self._run
        if run is None:
            return
        snapshot = {
            k: v.detach().to('cpu', copy=True) if isinstance(v, torch.Tensor) else v
            for k, v in state_dict['model'].items()
        }
        run.publish_skipped = False
        self._publisher.submit(run, snapshot, int(state_dict['iter']))

    def _write_policy(self, run: _Run, model: dict[str, Any], policy_iter: int) -> None:
        """Publisher thread: write one policy file.

        ``save_policy`` overwriting the file in place would leave collectors polling it without a manifest
        for the whole write; writing into ``{path_policy}/.staging`` and renaming both files over the old
        ones shrinks the window in which a reader finds a mismatched pair to two renames.
        """
        staging = os.path.join(run.path_policy, '.staging')
        try:
            data = save_policy(staging, run.policy_name, model, policy_iter)
            os.replace(data, os.path.join(run.path_policy, os.path.basename(data)))
            manifest = manifest_path(data)
            os.replace(manifest, os.path.join(run.path_policy, os.path.basename(manifest)))
        except Exception as exc:  # collectors keep their last weights; training goes on
            self._logger.error(f'learner task {run.task_id}: cannot write the policy to {run.path_policy}: {exc}')
        run.published.set()

    def send_learn_info(self, learn_info: dict[str, Any]) -> None:
        """Complete the learn info of the iteration just trained and hand it to the waiting learn task."""
        run = self._run
        if run is None or run.ending.is_set():
            return
        learner = run.learner
        version = learner.train_iter  # inside after_iter: the weights version that trained this batch
        policy_iters, stale, unreadable = run.batch_stats.popleft() if run.batch_stats else ([], 0, 0)
        carried_stale, carried_unreadable = run.batch_trained(version)
        stale += carried_stale
        unreadable += carried_unreadable
        scalar = learner.log_buffer['scalar']
        info: dict[str, Any] = {}
        for k, v in scalar.items():
            v = number_or_none(v)
            if v is not None and k not in _OWN_SCALARS:
                info[k] = v
        if 'total_loss' in info:
            info['loss'] = info['total_loss']
        if policy_iters:
            lag = {
                'min': version - max(policy_iters),
                'mean': version - sum(policy_iters) / len(policy_iters),
                'max': version - min(policy_iters),
            }
            scalar['policy_lag_min'] = lag['min']
            scalar['policy_lag_mean'] = lag['mean']
            scalar['policy_lag_max'] = lag['max']
        else:
            lag = None
        scalar['stale_dropped'] = stale
        priority_info = learn_info.get('priority_info')
        info.update(
            {
                'task_id': run.task_id,
                'trained': True,
                'learner_step': learn_info['learner_step'],
                'learner_done': bool(learn_info.get('learner_done', False)),
                'policy_iter': version + 1,
                'priority_info': _plain(priority_info) if priority_info else None,
                'policy_lag': lag,
                'stale_dropped': stale,
                'unreadable': unreadable,
            }
        )
        if info['learner_done']:
            run.reason = 'finished'
        if self._hand_over_info(run, info):
            run.last_info_clock = (time.perf_counter(), time.process_time(), time.thread_time())
            if run.first_info_clock is None:
                run.first_info_clock = run.last_info_clock
            run.learn_infos += 1

    def _hand_over_info(self, run: _Run, info: dict[str, Any]) -> bool:
        """Give one iteration's learn info to the learn tasks; False if the run ended first.

        A single-batch run puts each info into the queue (its learn task waits for exactly that one). A
        ``num_batches`` run groups them: an info goes at once when a learn task may be waiting for its first
        one (after each demand: it answers as soon as it has one), when it is the run's last, or when
        ``comm_batches`` are grouped; the data loader also hands the group over right before each demand's
        marker. Each hand-over wakes the learn task's thread, which costs the learner thread too.
        """
        if run.comm_batches <= 1:
            return self._put(self._learn_info_queue, info, run)
        group = run.group_info(info)
        return True if group is None else self._put(self._learn_info_queue, _Infos(group), run)

    # ---- coordinator side (slave task threads) -------------------------------------------------------
    def deal_with_resource(self) -> dict[str, int]:
        return {'cpu': os.cpu_count() or 1, 'gpu': torch.cuda.device_count() if torch.cuda.is_available() else 0}

    def _active_run(self, what: str, task_info: dict[str, Any]) -> _Run:
        run = self._run
        if run is None:
            raise TaskFail(message=f'{what}: no learner task is running; send learner_start_task first')
        task_id = task_info.get('task_id') if isinstance(task_info, dict) else None
        if task_id is not None and task_id != run.task_id:
            raise TaskFail(message=f"{what}: task_id '{task_id}' is not the running learner task '{run.task_id}'")
        if run.ending.is_set() or run.reason:
            raise TaskFail(message=run.ended_message(what))
        return run

    def deal_with_learner_start(self, task_info: dict[str, Any]) -> dict[str, Any]:
        """Build the learner of a start task and start training in a new thread."""
        if not isinstance(task_info, dict) or not isinstance(task_info.get('task_id'), str):
            raise TaskFail(message="learner_start_task: task_info must be a dict with a string 'task_id'")
        task_id = task_info['task_id']
        with self._lifecycle_lock:
            if self._closed:
                raise TaskFail(message=f'learner_start_task {task_id}: the comm learner is closing')
            old = self._run
            if old is not None and not old.finished.is_set():
                self._logger.warning(f'learner task {old.task_id} is still running: closing it for task {task_id}')
                self._stop_run(old, f'replaced by learner task {task_id}')
                if not old.finished.is_set():
                    raise TaskFail(
                        message=f'learner_start_task {task_id}: the previous learner task '
                        f'{old.task_id} did not stop within {self._cfg.stop_timeout}s'
                    )
            self._drain_queues()
            try:
                run = self._prepare_run(task_info)
            except TaskFail:
                raise
            except Exception as exc:
                self._logger.exception(f'learner_start_task {task_id}: cannot create the learner')
                raise TaskFail(
                    message=f'learner_start_task {task_id}: cannot create the learner: {type(exc).__name__}: {exc}'
                ) from exc
            self._run = run
            run.thread = threading.Thread(
                target=self._learner_loop, args=(run,), daemon=True, name=f'ding-{self._cfg.name}-learner'
            )
            run.thread.start()
            # Answer once the weights are published: collectors started after this find the policy file.
            while not run.published.wait(_POLL_S):
                if run.finished.is_set():
                    raise TaskFail(message=run.ended_message(f'learner_start_task {task_id}'))
        self._logger.info(
            f'learner task {task_id} started at iteration {run.learner.train_iter}, '
            f'{run.learner.cfg.train_iterations} iterations to train'
        )
        service = self._service
        address = (
            service.server.address
            if service is not None and service.server is not None and service.weights is not None
            else None
        )
        return {
            'message': 'learner task has started',
            'task_id': task_id,
            'start_iter': run.learner.train_iter,
            'weights_address': address,
        }

    def _prepare_run(self, task_info: dict[str, Any]) -> _Run:
        cfg = self._cfg
        learner_cfg = task_info.get('learner_cfg') or {}
        max_staleness = learner_cfg.get('max_staleness', math.inf) if isinstance(learner_cfg, dict) else math.inf
        if max_staleness is None:
            max_staleness = math.inf
        if isinstance(max_staleness, bool) or not isinstance(max_staleness, (int, float)) or max_staleness < 0:
            raise ValueError(f"learner config 'max_staleness' must be a number >= 0, got {max_staleness!r}")
        # DI-engine keeps send_policy_freq in policy.learn.learner; the comm learner config's is the default.
        freq = (
            learner_cfg.get('send_policy_freq', cfg.send_policy_freq)
            if isinstance(learner_cfg, dict)
            else cfg.send_policy_freq
        )
        self._send_policy_freq = _check_freq(freq, "learner config 'send_policy_freq'")
        comm_batches = (
            learner_cfg.get('comm_batches', cfg.comm_batches) if isinstance(learner_cfg, dict) else cfg.comm_batches
        )
        comm_batches = _check_freq(comm_batches, "learner config 'comm_batches'")
        instance_name = task_info.get('instance_name') or cfg.name
        policy_name = task_info.get('policy_name') or f'policy_{instance_name}'
        path_policy = task_info.get('path_policy') or cfg.path_policy
        path_data = task_info.get('path_data') or cfg.path_data

        learner = self._create_learner(task_info)
        run = _Run(
            task_info['task_id'],
            learner,
            policy_name,
            path_policy,
            path_data,
            float(max_staleness),
            comm_batches,
            task_info['policy'],
        )
        self._attach_service(task_info, learner)
        resume = task_info.get('resume')
        if resume:
            if isinstance(resume, dict) and getattr(learner, 'resumed_from', None) is None:
                self._resume(run, resume, path_policy)  # no checkpoint of this run: the last published weights
            elif isinstance(resume, dict) and resume.get('policy_name'):
                run.policy_name = resume['policy_name']
            run.start_iter = learner.train_iter
            max_iterations = task_info.get('max_iterations')
            if max_iterations is not None:
                learner.cfg.train_iterations = max(0, int(max_iterations) - learner.train_iter)
        return run

    def _attach_service(self, task_info: dict[str, Any], learner: Any) -> None:
        """The run service of this learner process (``task_info['service']``, the config's ``service``
        section): ``/metrics``, ``/healthz``, ``/weights/*`` and ``/run/*`` on a free port (the configured
        port is the coordinator's), address in ``./{exp_name}/run_{name}.json``. Started once per process,
        attached to each task's learner."""
        section = task_info.get('service')
        if not isinstance(section, dict) or not (section.get('enable') or section.get('json_log')):
            return
        name = self._cfg.name
        runtime = self._service
        if runtime is None:
            from ding.service.hooks import ServiceRuntime

            runtime = ServiceRuntime(
                dict(section, port=0),
                task_info.get('exp_name') or self._cfg.exp_name,
                instance=name,
                log=self._logger.info,
            )
            self._service = runtime
        runtime.attach_learner(learner, control_hook=True, on_terminate=_request_stop)
        # Tunes the coordinator forwards (it checked them against the config): loss weights the policy keeps,
        # and batch_size, the size get_data asks the coordinator for from the next demand on.
        from ding.service.hooks import register_batch_size_attribute, register_loss_weights

        register_loss_weights(runtime.control, learner.policy)
        register_batch_size_attribute(runtime.control, learner.policy)
        if runtime.metrics is not None:
            runtime.metrics.track_hyperparameters(runtime.control.getters())
        runtime.control.on_terminate = lambda: runtime.terminate_with_checkpoint(learner)
        runtime.start_server(run_file=f'run_{name}.json')

    def _resume(self, run: _Run, resume: dict[str, Any], path_policy: str) -> None:
        """A task moved here from a dead learner: continue from the weights it last published."""
        if resume.get('policy_name'):
            run.policy_name = resume['policy_name']
        path = os.path.join(path_policy, run.policy_name + '.safetensors')
        try:
            state, policy_iter = load_policy(path)
            run.learner.policy.load_state_dict({'model': state})
        except (CheckpointError, KeyError, RuntimeError) as exc:
            self._logger.warning(
                f'learner task {run.task_id}: cannot resume from {path} ({exc}); training starts from fresh weights'
            )
            return
        run.learner.last_iter.update(policy_iter)
        self._logger.info(f'learner task {run.task_id}: resumed from {path} at iteration {policy_iter}')

    def _learner_loop(self, run: _Run) -> None:
        learner = run.learner
        try:
            if not run.ending.is_set():
                learner.start()
            if not run.reason:
                run.reason = 'finished' if not run.ending.is_set() else 'closed'
        except BaseException as exc:  # noqa: B902 - reported to the coordinator through the next task
            if run.ending.is_set():
                run.reason = run.reason or 'closed'
            else:
                run.error = f'{type(exc).__name__}: {exc}'
                self._logger.error(f'learner task {run.task_id} failed at iteration {learner.train_iter}: {run.error}')
        finally:
            group = run.take_info_group()  # infos grouped when the run stopped early: to a learn task still waiting
            if group:
                try:
                    self._learn_info_queue.put_nowait(_Infos(group))
                except queue.Full:
                    pass
            run.ending.set()
            if run.error is None and run.publish_skipped:
                # weights skipped for the publisher's interval (SendPolicyHook): the run's last ones go out
                try:
                    self.send_policy({'model': learner.policy.state_dict()['model'], 'iter': iterations_done(learner)})
                except Exception as exc:
                    self._logger.error(f'learner task {run.task_id}: cannot publish the last weights: {exc!r}')
            try:
                learner.close()
            except Exception as exc:
                self._logger.error(f'learner task {run.task_id}: error while closing the learner: {exc!r}')
            # The run's last weights are on disk before anyone is told it ended.
            if not self._publisher.flush(timeout=float(self._cfg.stop_timeout)):
                self._logger.error(
                    f'learner task {run.task_id}: the last policy file was not written within {self._cfg.stop_timeout}s'
                )
            rounds = max(run.learn_infos + run.rejected_batches, 1)
            rates = ''
            if run.first_info_clock is not None and run.learn_infos > 1:
                wall = run.last_info_clock[0] - run.first_info_clock[0]
                cpu = run.last_info_clock[1] - run.first_info_clock[1]
                training = run.last_info_clock[2] - run.first_info_clock[2]
                rates = (
                    f'; from the first learn info to the last: {run.learn_infos - 1} iterations in '
                    f'{wall:.2f}s wall, {cpu:.2f}s process CPU ({training:.2f}s of it in the training thread)'
                )
            self._logger.info(
                f'learner task {run.task_id} ended ({run.reason or "failed: " + str(run.error)}) at '
                f'iteration {learner.train_iter}: {run.learn_infos} learn infos sent, '
                f'{run.rejected_batches} batches rejected; per data round '
                f'{1e3 * run.in_tasks_s / rounds:.1f} ms in get-data/learn tasks, '
                f'{1e3 * run.between_tasks_s / rounds:.1f} ms between them (coordinator side); '
                f'{run.starved_s:.2f}s waiting with no batch received{rates}'
            )
            run.finished.set()  # last: whoever waits for it may start the next task at once

    def _stop_run(self, run: _Run, reason: str) -> None:
        """Stop the learner after its current iteration and wait for its thread (``stop_timeout``)."""
        if run.finished.is_set():
            return
        if not run.reason:
            run.reason = reason
        run.ending.set()
        _request_stop(run.learner)
        thread = run.thread
        if thread is not None and thread is not threading.current_thread():
            deadline = time.monotonic() + float(self._cfg.stop_timeout)
            while thread.is_alive() and time.monotonic() < deadline:
                _request_stop(run.learner)  # again: a learner that was just starting clears the flag
                thread.join(_POLL_S)
            if thread.is_alive():
                self._logger.error(
                    f'learner task {run.task_id}: the learner thread did not stop within {self._cfg.stop_timeout}s'
                )

    def _ended(self, run: _Run, what: str) -> TaskFail:
        """The failure for a task that found its run ended, once the learner thread is done (closed, and the
        exception checkpoint of a failure written) so that a new start task can follow at once."""
        run.finished.wait(float(self._cfg.stop_timeout))
        return TaskFail(message=run.ended_message(what))

    def deal_with_get_data(self, task_info: dict[str, Any]) -> dict[str, Any]:
        """Answer a get-data task with the learner's data demand (waits until the learner asks)."""
        run = self._active_run('learner_get_data_task', task_info)
        began = run.task_began()
        if run.outstanding_demand is None:
            demand = self._get(self._data_demand_queue, run)
            if demand is None:
                raise self._ended(run, 'learner_get_data_task')
            # Kept until data arrives: a coordinator that asks again (e.g. it had too little data) gets it again.
            run.outstanding_demand = demand
        run.task_ended(began)
        return dict(run.outstanding_demand)

    def deal_with_learner_learn(self, task_info: dict[str, Any], data: Any) -> dict[str, Any]:
        """Hand the batch's metadata to the learner and answer with the learn info of the iteration it trained."""
        run = self._active_run('learner_learn_task', task_info)
        tune = task_info.get('tune')
        if tune and self._service is not None:
            # From the coordinator's run control; the learner's RunControlHook applies it between iterations.
            try:
                self._service.control.request_tune(tune, source='coordinator')
            except Exception as exc:  # a bad tune must not fail the learn task
                self._logger.warning(f'learner task {run.task_id}: tune {tune} not applied: {exc}')
        if run.outstanding_demand is None:
            raise TaskFail(
                message=f'learner_learn_task: learner task {run.task_id} has no data demand pending; '
                f'send learner_get_data_task first'
            )
        several = 'num_batches' in run.outstanding_demand
        batches = learn_task_batches(run.outstanding_demand, data)
        began = run.task_began()
        # The demand this learn task serves: the loader issues the next one only after receiving this data.
        served = run.demands_issued
        if not self._put(self._data_result_queue, data, run):
            raise self._ended(run, 'learner_learn_task')
        run.outstanding_demand = None
        if not several:
            info = self._get(self._learn_info_queue, run)
            if info is None:
                raise self._ended(run, 'learner_learn_task')
            run.task_ended(began)
            return info
        # One answer is owed per batch received, in order: a learn info, or the rejection of a batch nothing
        # trained on. Once the learner has asked for batches beyond this demand's (and some infos are in),
        # answer with what is there: the learn task bringing those batches carries the rest, so the learner
        # keeps training meanwhile. Without such a later demand (the run's last one) every owed answer is
        # waited for: no learn task follows to carry it.
        run.owed += len(batches)
        infos, messages = [], []
        demanded = False
        while run.owed > 0 and not (demanded and infos):
            answer = self._get(self._learn_info_queue, run)
            if answer is None:
                if infos:  # the run stopped part-way (closed / failed): the iterations that trained still count
                    break
                raise self._ended(run, 'learner_learn_task')
            if answer.__class__ is _Demanded:
                demanded = demanded or answer.seq > served
                continue
            for one in answer.items if answer.__class__ is _Infos else (answer,):
                run.owed -= 1
                if one.get('trained'):
                    infos.append(one)
                elif one.get('message'):
                    messages.append(one['message'])
        run.task_ended(began)
        result = {'task_id': run.task_id, 'trained': bool(infos), 'infos': infos}
        if messages:
            result['message'] = '; '.join(messages)
        return result

    def deal_with_learner_close(self, task_info: dict[str, Any]) -> dict[str, Any]:
        """Stop the running learner task (the comm learner stays up for the next start task)."""
        run = self._run
        task_id = task_info.get('task_id') if isinstance(task_info, dict) else None
        if run is None:
            return {'message': 'learner task has closed', 'task_id': task_id, 'last_iter': 0}
        if task_id is not None and task_id != run.task_id:
            # Nothing of that task runs here (e.g. it was moved elsewhere): closed already.
            return {'message': 'learner task has closed', 'task_id': task_id, 'last_iter': 0}
        with self._lifecycle_lock:
            self._stop_run(run, 'closed by learner_close_task')
        return {
            'message': 'learner task has closed',
            'task_id': run.task_id,
            'last_iter': run.learner.train_iter,
            'learn_infos': run.learn_infos,
        }

    def deal_with_lost_master(self, master_address: str, err: Any) -> None:
        """The coordinator left (disconnected, or stopped answering heartbeats): it fails this worker's learner
        task and moves it, so stop it here (in the background; the slave's thread must not wait)."""
        run = self._run
        if run is None or run.finished.is_set():
            return
        self._logger.warning(f'{master_address} left ({err}): stopping learner task {run.task_id}')

        def _stop() -> None:
            with self._lifecycle_lock:
                if self._run is run:
                    self._stop_run(run, f'{master_address} left')

        threading.Thread(target=_stop, name=f'ding-{self._cfg.name}-stop', daemon=True).start()


__all__ = ['FlaskFileSystemLearner', 'LearnerSlave']
