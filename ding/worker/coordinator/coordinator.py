"""The coordinator of the parallel pipeline: turns the commander's decisions into running tasks and moves
sample metadata from collectors to the learner through one replay buffer per learner task."""

from __future__ import annotations

import copy
import json
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.utils.file_names import manifest_path, split_data_id

from .base_parallel_commander import create_parallel_commander
from .comm_coordinator import CommCoordinator

STATE_FILE = 'coordinator_state.json'  # under ./{exp_name}/: the counters a resumed run continues from


class TaskState:
    """A task handed to a worker: its id and since when."""

    def __init__(self, task_id: str, worker: str | None = None) -> None:
        self.task_id = task_id
        self.worker = worker
        self.start_time = time.time()


class Coordinator:
    """Runs the parallel training: learner tasks, collector tasks, their data, and the end of the run.

    Threads: ``produce_*`` ask the commander for new learner / collector tasks and queue them,
    ``assign_*`` hand queued tasks to idle workers through the :class:`CommCoordinator` (a task that
    finds no idle worker within ``*_task_timeout`` seconds is given up and reported to the commander).
    The comm coordinator calls back the ``deal_with_*`` methods as tasks progress. A task whose worker
    dies is put back into the queue (at most ``task_retries`` times) and so goes to a live worker;
    a learner task keeps its replay buffer and policy file across such moves.

    ``system_shutdown_flag`` turns True when the commander ends the run (e.g. the stop value was reached)
    or a limit (``max_env_step`` / ``max_train_iter``) is hit; the owner then calls ``close()``.
    """

    config = dict(
        # seconds a queued task may wait for an idle worker before it is given up
        collector_task_timeout=30.0,
        learner_task_timeout=600.0,
        # seconds one request to a worker may take (e.g. a collector producing one batch of data)
        # before the worker counts as dead
        collector_request_timeout=30.0,
        learner_request_timeout=30.0,
        # how often a task whose worker died is given to another worker before it is given up
        task_retries=3,
        # seconds before a failed task is offered to the workers again
        retry_delay=0.5,
        # pacing: collectors are asked for more data only while the samples pushed so far stay below
        # pacing_warmup_samples + max_samples_per_iter * learner iterations (or while the learner waits
        # for data); this keeps the replay ratio near the serial pipeline's instead of letting collectors
        # take the CPU the learner needs. None: collectors run free (DI-engine's behaviour).
        max_samples_per_iter=None,
        pacing_warmup_samples=1000,
        # interaction layer: the master drops a slave silent for heartbeat_tolerance seconds
        heartbeat_tolerance=15.0,
        heartbeat_check_span=0.5,
        request_retries=1,
        request_retry_waiting=0.2,
        channel=0,
        # seconds between attempts to (re)connect to a worker that is not connected
        reconnect_interval=0.5,
        # log the learner's policy lag and the buffer size every this many learner iterations
        log_every_iter=200,
        # sample files in path_data that no replay buffer refers to any more are deleted every
        # data_gc_interval seconds once older than data_gc_min_age seconds (a learner may still be
        # reading them), and all of them when the coordinator closes unless keep_data
        data_gc_interval=30.0,
        data_gc_min_age=60.0,
        keep_data=False,
        operator_server=dict(),
    )

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def __init__(
        self,
        cfg: dict[str, Any],
        max_env_step: int | None = None,
        max_train_iter: int | None = None,
        log_to_console: bool = False,
        resume: str | None = None,
        run_started: float | None = None,
    ) -> None:
        """``cfg``: the compiled parallel config (``main`` and ``system`` sections). The run also ends after
        ``max_env_step`` env steps or ``max_train_iter`` learner iterations when given. ``resume``: the
        checkpoint the first learner task starts from (``ding.worker.resume.resolve_resume``); ``run_started``:
        when the run began (a restarted learner resumes only from checkpoints written since, or since the
        resumed one)."""
        from ding.utils.log_helper import build_logger

        self._cfg = EasyDict(cfg)
        coor_cfg = EasyDict(copy.deepcopy(dict(self.default_config())))
        coor_cfg.update(self._cfg.system.coordinator)
        self._coor_cfg = coor_cfg
        self._exp_name = self._cfg.main.exp_name
        self._collector_task_timeout = float(coor_cfg.collector_task_timeout)
        self._learner_task_timeout = float(coor_cfg.learner_task_timeout)
        self._task_retries = int(coor_cfg.task_retries)
        self._log_every_iter = max(1, int(coor_cfg.log_every_iter))
        self._max_env_step = max_env_step
        self._max_train_iter = max_train_iter
        pace = coor_cfg.max_samples_per_iter
        self._max_samples_per_iter = None if pace is None else float(pace)
        self._pacing_warmup = float(coor_cfg.pacing_warmup_samples)
        self._learner_starving = False
        # run service (see attach_service): pause gate, learner tunes forwarded in the next learn task
        self._resume = resume
        self._run_started = float(run_started) if run_started is not None else time.time()
        self._paused = False
        self._weights_address: str | None = None
        collector_cfg = self._cfg.main.policy.collect.collector
        # collectors fetching weights over HTTP from the address the learner reports (none configured)
        self._http_weights = collector_cfg.get('policy_transport') == 'http' and not collector_cfg.get(
            'weights_address'
        )
        self._learner_tune: dict[str, Any] = {}
        self._tuned_keys: set = set()  # policy.learn keys changed by run control (copied into learner tasks)
        self._tune_lock = threading.Lock()
        self.service: Any = None

        self._logger, _ = build_logger(
            f'./{self._exp_name}/log/coordinator', 'coordinator', need_tb=False, to_console=log_to_console
        )
        self._callback = {
            'deal_with_collector_send_data': self.deal_with_collector_send_data,
            'deal_with_collector_judge_finish': self.deal_with_collector_judge_finish,
            'deal_with_collector_finish_task': self.deal_with_collector_finish_task,
            'deal_with_collector_fail_task': self.deal_with_collector_fail_task,
            'deal_with_learner_get_data': self.deal_with_learner_get_data,
            'deal_with_learner_send_info': self.deal_with_learner_send_info,
            'deal_with_learner_judge_finish': self.deal_with_learner_judge_finish,
            'deal_with_learner_finish_task': self.deal_with_learner_finish_task,
            'deal_with_learner_fail_task': self.deal_with_learner_fail_task,
            'deal_with_increase_collector': self.deal_with_increase_collector,
            'deal_with_decrease_collector': self.deal_with_decrease_collector,
            'deal_with_worker_change': self._notify_change,
            'wait_for_data': self.wait_for_data,
            'wait_collect_budget': self.wait_collect_budget,
            'deal_with_learner_started': self.deal_with_learner_started,
            'learner_task_extra': self.learner_task_extra,
        }
        self._commander = create_parallel_commander(self._cfg.main)
        self._commander_lock = threading.RLock()
        self._interaction = CommCoordinator(coor_cfg, self._callback, self._logger, system_cfg=self._cfg.system)
        self._learner_task_queue: queue.Queue = queue.Queue()
        self._collector_task_queue: queue.Queue = queue.Queue()

        self._replay_buffer: dict[str, Any] = {}
        self._closed_buffers: set = set()
        self._buffer_lock = threading.Lock()
        self._data_arrived = threading.Condition()
        self._task_state: dict[str, TaskState] = {}
        self._historical_task: deque[str] = deque(maxlen=1000)
        self._retries: dict[str, int] = {}
        self._changed = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._end_flag = True
        self._closed = False
        self._system_shutdown_flag = False
        self._shutdown_reason = ''
        self._solved = False

        # run statistics (for the summary line and the benchmarks)
        self._stats_lock = threading.Lock()
        self.train_iter = 0
        self.learn_info_count = 0
        self.pushed_samples = 0
        self.sampled_batches = 0
        self.policy_lag: dict[str, float] = {}
        self.stale_dropped = 0
        self.buffer_stale_removed = 0
        self._data_files: set = set()
        self.failed_tasks: list[dict[str, Any]] = []
        self.start_time: float | None = None
        self._state_saved_at = 0.0
        if resume:
            self.restore_state()

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the master, connect to the workers and begin producing / assigning tasks."""
        self._end_flag = False
        self.start_time = time.time()
        self._interaction.start()
        for target, name in (
            (self._produce_learner_task, 'produce_learner'),
            (self._assign_learner_task, 'assign_learner'),
            (self._produce_collector_task, 'produce_collector'),
            (self._assign_collector_task, 'assign_collector'),
            (self._data_gc_loop, 'data_gc'),
        ):
            t = threading.Thread(target=target, name=f'coordinator_{name}', daemon=True)
            t.start()
            self._threads.append(t)
        self.info('coordinator started')

    def close(self) -> None:
        """Stop producing tasks, close the running ones on the workers, close the buffers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._end_flag = True
        # Requests in flight (e.g. a start task an assign thread waits for) give up now.
        self._interaction.stop_requests()
        self._notify_change()
        with self._data_arrived:
            self._data_arrived.notify_all()
        for t in self._threads:
            t.join(timeout=5)
        self._interaction.close()
        with self._buffer_lock:
            buffer_ids = list(self._replay_buffer)
        for buffer_id in buffer_ids:
            self._close_buffer(buffer_id)
        if not self._coor_cfg.keep_data:
            self.collect_data_garbage(min_age=0.0)
        with self._commander_lock:
            self._commander.close()
        self.info(f'coordinator closed ({self._shutdown_reason or "no stop reason"})')
        from ding.utils.log_helper import close_logger

        close_logger(self._logger)

    def __del__(self) -> None:
        # Only the cheap part: a coordinator that was never closed must not keep its threads spinning.
        self._end_flag = True

    # ---- state of the run -----------------------------------------------------------------------
    @property
    def system_shutdown_flag(self) -> bool:
        return self._system_shutdown_flag

    @property
    def solved(self) -> bool:
        return self._solved

    @property
    def shutdown_reason(self) -> str:
        return self._shutdown_reason

    @property
    def commander(self) -> Any:
        return self._commander

    @property
    def interaction(self) -> CommCoordinator:
        return self._interaction

    @property
    def env_step(self) -> int:
        return int(getattr(self._commander, 'total_collector_env_step', 0))

    @property
    def best_eval_return(self) -> float:
        return float(getattr(self._commander, 'best_eval_return', float('-inf')))

    def replay_buffer(self, buffer_id: str) -> Any | None:
        with self._buffer_lock:
            return self._replay_buffer.get(buffer_id)

    def state_dict(self) -> dict:
        """The run's counters (env steps, learner iteration, samples pushed) that a resumed run continues."""
        with self._commander_lock:
            state = dict(self._commander.state_dict()) if hasattr(self._commander, 'state_dict') else {}
        with self._stats_lock:
            state.update(env_step=self.env_step, train_iter=self.train_iter, pushed_samples=self.pushed_samples)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        with self._commander_lock:
            if hasattr(self._commander, 'load_state_dict'):
                self._commander.load_state_dict(state_dict)
        with self._stats_lock:
            self.train_iter = max(self.train_iter, int(state_dict.get('train_iter') or 0))
            self.pushed_samples = int(state_dict.get('pushed_samples') or 0)

    @property
    def state_path(self) -> str:
        """``./{exp_name}/coordinator_state.json``: the counters, rewritten (atomically) as the run goes."""
        return os.path.join('.', self._exp_name, STATE_FILE)

    def save_state(self, min_interval: float = 0.0) -> str | None:
        """Write ``state_dict()`` to ``state_path`` (temp file, fsync, rename: a kill never leaves half a
        file); skipped when the last write is less than ``min_interval`` s old. Returns the path if written."""
        now = time.time()
        if now - self._state_saved_at < min_interval:
            return None
        self._state_saved_at = now
        state = dict(self.state_dict(), time=now, exp_name=self._exp_name)
        path = self.state_path
        tmp = f'{path}.{os.getpid()}.tmp'
        try:
            with open(tmp, 'w', encoding='utf-8') as f:
                json.dump(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:  # the run goes on; only a later resume would start its counters older
            self.error(f'cannot write {path}: {exc}')
            return None
        return path

    def restore_state(self) -> dict | None:
        """At the start of a resumed run: load ``state_path`` if there is one (None otherwise)."""
        path = self.state_path
        try:
            with open(path, encoding='utf-8') as f:
                state = json.load(f)
        except FileNotFoundError:
            self.info(f'resume: no {path}; env steps start from 0')
            return None
        except (OSError, ValueError) as exc:
            self.error(f'resume: cannot read {path} ({exc}); env steps start from 0')
            return None
        if not isinstance(state, dict):
            self.error(f'resume: {path} holds no object; env steps start from 0')
            return None
        self.load_state_dict(state)
        self.info(f'resume: continuing from {path}: env_step {self.env_step}, train_iter {self.train_iter}')
        return state

    def notify_worker_dead(self, kind: str, name: str) -> None:
        """The pipeline saw worker ``name`` exit: fail its task now instead of waiting for heartbeats."""
        self.info(f'{kind} {name} reported dead by the pipeline')
        self._interaction.notify_worker_dead(kind, name)

    def update_worker_address(self, kind: str, name: str, host: str, port: int) -> None:
        """A restarted worker listens elsewhere: connect there from now on."""
        self._interaction.update_worker_address(kind, name, host, port)

    def _shutdown(self, reason: str, solved: bool = False) -> None:
        if not self._system_shutdown_flag:
            self._shutdown_reason = reason
            self._solved = solved
            self._system_shutdown_flag = True
            self.info(f'the run ends: {reason}')
        self._end_flag = True
        self._notify_change()

    def _check_limits(self) -> None:
        if self._max_train_iter is not None and self.train_iter >= self._max_train_iter:
            self._shutdown('max_train_iter reached')
        elif self._max_env_step is not None and self.env_step >= self._max_env_step:
            self._shutdown('max_env_step reached')

    # ---- produce / assign threads ------------------------------------------------------------------
    def _notify_change(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _wait_change(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def _produce(self, get_task: Callable[[], dict | None], task_queue: queue.Queue, kind: str) -> None:
        while not self._end_flag:
            if self._paused:  # run control: no new tasks while paused
                self._wait_change(0.2)
                continue
            with self._commander_lock:
                task = get_task()
            if task is None:
                # Commanders decide on time (e.g. the eval interval) as well as on events: poll slowly.
                self._wait_change(0.2)
                continue
            self.info(f'{kind} task {task["task_id"]} queued')
            task_queue.put((task, time.time()))

    def _produce_learner_task(self) -> None:
        self._produce(lambda: self._commander.get_learner_task(), self._learner_task_queue, 'learner')

    def _produce_collector_task(self) -> None:
        self._produce(lambda: self._commander.get_collector_task(), self._collector_task_queue, 'collector')

    def _assign_learner_task(self) -> None:
        while not self._end_flag:
            try:
                task, put_time = self._learner_task_queue.get(timeout=0.2)
            except queue.Empty:
                continue
            while not self._end_flag:
                if time.time() - put_time >= self._learner_task_timeout:
                    self.error(
                        f'learner task {task["task_id"]}: no learner took it within '
                        f'{self._learner_task_timeout}s, giving up'
                    )
                    self._give_up_learner_task(task)
                    break
                buffer_id = task['buffer_id']
                self._add_service_fields(task)
                with self._buffer_lock:
                    if buffer_id not in self._replay_buffer:
                        self._replay_buffer[buffer_id] = self._create_buffer(task)
                self._task_state[task['task_id']] = TaskState(task['task_id'])
                if self._interaction.send_learner_task(task):
                    self.info(f'learner task {task["task_id"]} handed to {task.get("learner_id")}')
                    break
                self._task_state.pop(task['task_id'], None)
                self._wait_change(0.5)

    def _create_buffer(self, task: dict) -> Any:
        from ding.worker.replay_buffer import create_buffer

        buffer = create_buffer(
            EasyDict(task['replay_buffer_cfg']), exp_name=self._exp_name, instance_name=task['buffer_id']
        )
        buffer.start()
        self.info(f'replay buffer {task["buffer_id"]} created')
        return buffer

    def _assign_collector_task(self) -> None:
        while not self._end_flag:
            try:
                task, put_time = self._collector_task_queue.get(timeout=0.2)
            except queue.Empty:
                continue
            while not self._end_flag:
                if time.time() - put_time >= self._collector_task_timeout:
                    self.error(
                        f'collector task {task["task_id"]}: no collector took it within '
                        f'{self._collector_task_timeout}s, giving up'
                    )
                    self._give_up_collector_task(task)
                    break
                buffer_id = task['buffer_id']
                with self._buffer_lock:
                    has_buffer = buffer_id in self._replay_buffer
                    buffer_closed = buffer_id in self._closed_buffers
                if buffer_closed:
                    # Its learner task is over: the data would have nowhere to go.
                    self._give_up_collector_task(task)
                    break
                if has_buffer and self._http_weights and not self._weights_address:
                    has_buffer = False  # wait until the learner said where it serves its weights
                if has_buffer:
                    if self._http_weights:  # collectors with policy_transport='http' fetch from there
                        task['weights_address'] = self._weights_address
                    self._task_state[task['task_id']] = TaskState(task['task_id'])
                    if self._interaction.send_collector_task(task):
                        self.info(f'collector task {task["task_id"]} handed to {task.get("collector_id")}')
                        break
                    self._task_state.pop(task['task_id'], None)
                self._wait_change(0.5)

    def _give_up_collector_task(self, task: dict) -> None:
        self._task_state.pop(task['task_id'], None)
        with self._commander_lock:
            self._commander.notify_fail_collector_task(task)
            ended = self._commander.end_flag
        if ended:
            self._shutdown(getattr(self._commander, 'end_reason', '') or 'the commander ended the run')
        self._notify_change()

    def _give_up_learner_task(self, task: dict) -> None:
        self._task_state.pop(task['task_id'], None)
        with self._commander_lock:
            self._commander.notify_fail_learner_task(task)
        self._close_buffer(task['buffer_id'])
        self._notify_change()

    def _close_buffer(self, buffer_id: str | None) -> None:
        if buffer_id is None:
            return
        with self._buffer_lock:
            buffer = self._replay_buffer.pop(buffer_id, None)
            self._closed_buffers.add(buffer_id)
        if buffer is not None:
            removed = int(getattr(buffer, 'staleness_remove_count', 0) or 0)
            with self._stats_lock:
                self.buffer_stale_removed += removed
            buffer.close()
            self.info(f'replay buffer {buffer_id} closed ({removed} stale samples removed)')

    # ---- sample files ------------------------------------------------------------------------------
    def _data_gc_loop(self) -> None:
        interval = float(self._coor_cfg.data_gc_interval)
        if interval <= 0:
            return
        next_gc = time.time() + interval
        while not self._end_flag:
            self._wait_change(1.0)
            if time.time() >= next_gc:
                self.collect_data_garbage(float(self._coor_cfg.data_gc_min_age))
                next_gc = time.time() + interval

    def collect_data_garbage(self, min_age: float) -> int:
        """Delete sample files no replay buffer refers to and older than ``min_age`` s; return how many."""
        path_data = self._cfg.system.path_data
        with self._buffer_lock:
            buffers = list(self._replay_buffer.values())
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
            path = os.path.join(path_data, name)
            try:
                if now - os.path.getmtime(path) < min_age:
                    continue
            except OSError:
                pass
            removed += self._remove_data_file(name)
        if removed:
            self.info(f'removed {removed} sample files no buffer refers to')
        return removed

    def _remove_data_file(self, name: str) -> int:
        """Delete one sample file and its manifest; 1 if it is gone now, 0 if it could not be removed."""
        path = os.path.join(self._cfg.system.path_data, name)
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

    # ---- collector callbacks ---------------------------------------------------------------------
    def deal_with_collector_send_data(self, task_id: str, buffer_id: str, data: list[dict]) -> None:
        """Push the sample metadata of one collector answer into its learner task's buffer."""
        names = set()
        for d in data:  # data ids come over the network: only well-formed plain file names touch the disk
            try:
                names.add(split_data_id(str(d.get('data_id', '')))[0])
            except ValueError:
                pass
        buffer = self.replay_buffer(buffer_id)
        if buffer is None:
            # An answer that arrives after its buffer closed (e.g. at the end of the run): nothing will ever
            # read these samples, so their files go now rather than outliving the run.
            self.error(f'collector task {task_id}: no replay buffer {buffer_id}, {len(data)} samples dropped')
            for name in names:
                self._remove_data_file(name)
            return
        if not data:
            return
        buffer.push(data, cur_collector_envstep=-1)
        with self._stats_lock:
            self.pushed_samples += len(data)
            self._data_files.update(names)
        with self._data_arrived:
            self._data_arrived.notify_all()

    def deal_with_collector_judge_finish(self, task_id: str, info: dict) -> bool:
        with self._commander_lock:
            return self._commander.judge_collector_finish(task_id, info)

    def deal_with_collector_finish_task(self, task_id: str, finished_task: dict) -> None:
        """A collector task ended normally; its finish info may end the whole run."""
        self._task_state.pop(task_id, None)
        self._retries.pop(task_id, None)
        self._historical_task.append(task_id)
        with self._commander_lock:
            shutdown = self._commander.finish_collector_task(task_id, finished_task)
        kind = 'evaluator' if finished_task.get('eval_flag') else 'collector'
        self.info(
            f'{kind} task {task_id} finished: episodes {finished_task.get("episode_count")}, steps '
            f'{finished_task.get("step_count")}, reward_mean {finished_task.get("reward_mean")}'
        )
        if shutdown:
            self._shutdown(
                getattr(self._commander, 'end_reason', '') or 'the commander ended the run',
                solved=bool(getattr(self._commander, 'solved', False)),
            )
        else:
            self._check_limits()
        self._notify_change()

    def deal_with_collector_fail_task(self, task: dict, reason: str) -> None:
        """The collector running ``task`` died or failed it: give the task to another collector, or give up."""
        self._task_fail(task, reason, 'collector')

    # ---- learner callbacks -----------------------------------------------------------------------
    def deal_with_learner_get_data(
        self, task_id: str, buffer_id: str, batch_size: int, cur_learner_iter: int
    ) -> list[dict] | None:
        """``batch_size`` metadata for the learner (stale ones filtered by the buffer), or None if too few yet."""
        buffer = self.replay_buffer(buffer_id)
        if buffer is None or self._paused:  # paused: the learner waits for data, i.e. between iterations
            return None
        data = buffer.sample(batch_size, cur_learner_iter)
        if data is not None:
            with self._stats_lock:
                self.sampled_batches += 1
            self._learner_starving = False
        elif not self._learner_starving:
            # Pacing must not hold collectors back while the learner has nothing to train on.
            self._learner_starving = True
            with self._data_arrived:
                self._data_arrived.notify_all()
        return data

    def wait_for_data(self, timeout: float) -> None:
        """Block until a collector pushes data (or ``timeout`` passes, or the run ends)."""
        with self._data_arrived:
            if not self._end_flag:
                self._data_arrived.wait(timeout)

    def collect_budget_open(self) -> bool:
        """Whether collectors may hand over more samples now (see ``max_samples_per_iter``)."""
        if self._paused:
            return False
        if self._max_samples_per_iter is None or self._learner_starving:
            return True
        return self.pushed_samples < self._pacing_warmup + self._max_samples_per_iter * self.train_iter

    def wait_collect_budget(self, timeout: float = 0.25) -> bool:
        """Wait (at most ``timeout`` s) until collectors may hand over more samples; returns whether they may."""
        if self.collect_budget_open():
            return True
        with self._data_arrived:
            if not self._end_flag:
                self._data_arrived.wait(timeout)
        return self.collect_budget_open()

    def deal_with_learner_send_info(self, task_id: str, buffer_id: str, info: dict) -> None:
        """One training iteration's learn info: priorities to the buffer, progress to the commander."""
        priority_info = info.get('priority_info')
        if priority_info:
            buffer = self.replay_buffer(buffer_id)
            if buffer is not None:
                buffer.update(priority_info)
        with self._commander_lock:
            self._commander.update_learner_info(task_id, info)
        with self._stats_lock:
            step = info.get('learner_step', info.get('policy_iter'))
            if isinstance(step, (int, float)) and not isinstance(step, bool):
                self.train_iter = max(self.train_iter, int(step))
            self.learn_info_count += 1
            lag = info.get('policy_lag')
            if isinstance(lag, dict):
                self.policy_lag = lag
            dropped = info.get('stale_dropped')
            if isinstance(dropped, (int, float)) and not isinstance(dropped, bool):
                self.stale_dropped += int(dropped)
            count = self.learn_info_count
        if self._max_samples_per_iter is not None:
            with self._data_arrived:  # paced collectors may go on
                self._data_arrived.notify_all()
        if count % self._log_every_iter == 0:
            buffer = self.replay_buffer(buffer_id)
            size = buffer.count() if buffer is not None else 0
            self.info(
                f'learner task {task_id}: iter {self.train_iter}, policy lag {self.policy_lag}, '
                f'buffer {size}, stale dropped {self.stale_dropped}'
            )
        self._check_limits()

    def deal_with_learner_judge_finish(self, task_id: str, info: dict) -> bool:
        with self._commander_lock:
            return self._commander.judge_learner_finish(task_id, info)

    def deal_with_learner_finish_task(self, task_id: str, finished_task: dict) -> None:
        """A learner task ended normally (e.g. ``max_iterations``): its buffer is closed."""
        self._task_state.pop(task_id, None)
        self._retries.pop(task_id, None)
        self._historical_task.append(task_id)
        with self._commander_lock:
            buffer_id = self._commander.finish_learner_task(task_id, finished_task)
        self.info(f'learner task {task_id} finished')
        self._close_buffer(buffer_id)
        self._notify_change()

    def deal_with_learner_fail_task(self, task: dict, reason: str) -> None:
        """The learner running ``task`` died or failed it: give it to another learner (resuming), or give up."""
        self._task_fail(task, reason, 'learner')

    def _task_fail(self, task: dict, reason: str, kind: str) -> None:
        task_id = task['task_id']
        self._task_state.pop(task_id, None)
        record = {
            'task_id': task_id,
            'kind': kind,
            'worker': task.get(f'{kind}_id'),
            'reason': reason,
            'time': time.time(),
        }
        with self._stats_lock:
            self.failed_tasks.append(record)
        if self._end_flag:
            return
        tries = self._retries.get(task_id, 0) + 1
        self._retries[task_id] = tries
        if tries > self._task_retries:
            self.error(f'{kind} task {task_id} failed {tries} times, giving up: {reason}')
            if kind == 'learner':
                self._give_up_learner_task(task)
            else:
                self._give_up_collector_task(task)
            return
        self.error(
            f'{kind} task {task_id} failed on {task.get(f"{kind}_id")} ({reason}); reassigning (attempt {tries + 1})'
        )
        task = dict(task)
        task.pop(f'{kind}_id', None)
        task.pop('resource_info', None)
        if kind == 'learner':
            # The new learner loads its own newest checkpoint of this run (or of the resumed one), else
            # the last published weights.
            task['resume'] = {
                'policy_name': task.get('policy_name'),
                'last_iter': self.train_iter,
                'checkpoint': 'auto',
                'not_before': None if self._resume else self._run_started,
            }
        task_queue = self._learner_task_queue if kind == 'learner' else self._collector_task_queue
        # A short pause before the retry: a worker that refuses a task at once must not make a busy loop.
        timer = threading.Timer(float(self._coor_cfg.retry_delay), self._requeue, args=(task_queue, task))
        timer.daemon = True
        timer.start()

    def _requeue(self, task_queue: queue.Queue, task: dict) -> None:
        if not self._end_flag:
            task_queue.put((task, time.time()))
            self._notify_change()

    # ---- run service -----------------------------------------------------------------------------
    def _add_service_fields(self, task: dict) -> None:
        """What a learner start task carries for the run service and resume (see docs/operations.md)."""
        task.setdefault('service', copy.deepcopy(self._cfg.main.get('service')))
        task.setdefault('run_started', self._run_started)
        if self._tuned_keys and isinstance(task.get('policy'), dict):  # a restarted learner keeps the tunes
            learn = task['policy'].setdefault('learn', {})
            for key in list(self._tuned_keys):
                learn[key] = self._cfg.main.policy.learn[key]
        if self._resume and 'resume' not in task:
            task['resume'] = self._resume  # the first learner task of a resumed run

    def attach_service(self, runtime: Any) -> None:
        """Make this run controllable through ``runtime`` (``ding.service.start_service(..., instance=
        'coordinator')``): tunables (learning rate forwarded to the learner, epsilon schedule of the
        commander), terminate ends the run (the learner writes its final checkpoint when its task closes).
        The owner calls ``poll_service()`` between rounds."""
        self.service = runtime
        control = runtime.control
        learn_cfg = self._cfg.main.policy.learn
        buffer_size = self._cfg.main.policy.get('other', {}).get('replay_buffer', {}).get('replay_buffer_size')

        def check_batch(value: int, pending: dict[str, Any]) -> str | None:
            if isinstance(buffer_size, int) and value > buffer_size:
                return (
                    f'batch_size = {value} must not exceed policy.other.replay_buffer.replay_buffer_size = '
                    f'{buffer_size}'
                )
            return None

        # Forwarded to the learner with the next learn task; its run control applies them between iterations
        # (loss weights exist only where the policy config has them, e.g. PPO / A2C, not DQN).
        for key, kind in (
            ('learning_rate', float),
            ('entropy_weight', float),
            ('value_weight', float),
            ('batch_size', int),
        ):
            value = learn_cfg.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                runtime.register_tunable(
                    key,
                    lambda k=key, t=kind: t(learn_cfg[k]),
                    self._forward_tune(key, kind),
                    check_batch if key == 'batch_size' else None,
                )
        if self._max_samples_per_iter is not None:
            runtime.register_tunable(
                'max_samples_per_iter', lambda: self._max_samples_per_iter, self._set_max_samples_per_iter
            )
        self._register_eps_tunables(runtime)
        control.on_terminate = self._terminate_by_control

    def _forward_tune(self, key: str, kind: Callable[[Any], Any]) -> Callable[[Any], None]:
        def set_(value: Any) -> None:
            # Kept in the config too: learner tasks started later (e.g. after a learner restart) get it.
            self._cfg.main.policy.learn[key] = kind(value)
            self._tuned_keys.add(key)
            with self._tune_lock:
                self._learner_tune[key] = kind(value)

        return set_

    def _set_max_samples_per_iter(self, value: float) -> None:
        """Pacing from now on: the budget open at this moment stays open (no burst, no stall)."""
        with self._data_arrived:
            old, self._max_samples_per_iter = self._max_samples_per_iter, float(value)
            self._pacing_warmup += (old - self._max_samples_per_iter) * self.train_iter
            self._data_arrived.notify_all()

    def _register_eps_tunables(self, runtime: Any) -> None:
        eps_cfg = self._cfg.main.policy.get('other', {}).get('eps')
        command = getattr(self._commander, '_policy', None)
        policy = getattr(getattr(command, 'get_setting_collect', None), '__self__', None)
        if eps_cfg is None or policy is None or not hasattr(policy, 'epsilon_greedy'):
            return
        from ding.rl_utils import get_epsilon_greedy_fn

        def check_eps(value: Any, pending: dict[str, Any]) -> str | None:
            start, end = pending.get('eps.start', eps_cfg.start), pending.get('eps.end', eps_cfg.end)
            return f'eps.end = {end} must not exceed eps.start = {start}' if end > start else None

        def setter(field: str) -> Callable[[Any], None]:
            def set_(value: Any) -> None:
                with self._commander_lock:  # the next collector task's epsilon comes from the new schedule
                    eps_cfg[field] = value
                    policy.epsilon_greedy = get_epsilon_greedy_fn(
                        eps_cfg.start, eps_cfg.end, eps_cfg.decay, eps_cfg.type
                    )

            return set_

        for field in ('start', 'end', 'decay'):
            runtime.register_tunable(
                f'eps.{field}',
                lambda f=field: eps_cfg[f],
                setter(field),
                check_eps if field in ('start', 'end') else None,
            )

    def poll_service(self) -> str:
        """Between rounds (the pipeline's supervise loop): apply tunes, pause / resume the task flow, honour
        terminate. Returns the run control's state."""
        if self.service is None:
            return 'running'
        control, metrics, done = self.service.control, self.service.metrics, self.train_iter
        if done > control.iteration:  # the learner advanced: /healthz and the iteration metrics follow it
            if metrics is not None:
                metrics.sgd_steps.inc(done - control.iteration)
                metrics.iteration.set(done)
                metrics.last_step.set(time.time())
            control.note_progress(done)
        state = control.poll(done)
        paused = state in ('pausing', 'paused')
        if paused != self._paused:
            self._paused = paused
            self.info(
                'paused by run control: no new tasks, no data to the learner' if paused else 'resumed by run control'
            )
            self._notify_change()
            with self._data_arrived:
                self._data_arrived.notify_all()
        if self.service.metrics is not None:
            self.service.metrics.set_env_steps(self.env_step)
        return state

    def _terminate_by_control(self) -> dict[str, Any]:
        """``on_terminate``: end the run and close the tasks (the learner's close writes its final checkpoint)."""
        self._shutdown('terminated by run control')
        self.close()
        from ding.worker.resume import experiment_ckpt_dir, newest_valid_checkpoint

        out: dict[str, Any] = {'train_iter': self.train_iter}
        for name in self._cfg.system.get('learner', {}):
            path = newest_valid_checkpoint(experiment_ckpt_dir(self._exp_name, name), not_before=self._run_started)
            if path:
                out[f'checkpoint_{name}'] = path
        return out

    def deal_with_learner_started(self, task: dict, answer: dict) -> None:
        """A learner took a start task; its answer may name its run service (``weights_address``)."""
        address = answer.get('weights_address') if isinstance(answer, dict) else None
        if address and address != self._weights_address:
            self._weights_address = address
            self.info(f'learner {task.get("learner_id")} serves its weights at {address}')

    def learner_task_extra(self, task_id: str) -> dict[str, Any] | None:
        """Fields for the next learn task's task_info: tunes for the learner (sent once)."""
        if not self._learner_tune:
            return None
        with self._tune_lock:
            tune, self._learner_tune = self._learner_tune, {}
        return {'tune': tune}

    # ---- elastic collectors ----------------------------------------------------------------------
    def deal_with_increase_collector(self) -> None:
        with self._commander_lock:
            self._commander.increase_collector_task_space()

    def deal_with_decrease_collector(self) -> None:
        with self._commander_lock:
            self._commander.decrease_collector_task_space()

    # ---- logging ---------------------------------------------------------------------------------
    def info(self, s: str) -> None:
        self._logger.info(f'[Coordinator] {s}')

    def error(self, s: str) -> None:
        self._logger.error(f'[Coordinator] {s}')

    def summary(self) -> dict[str, Any]:
        """Figures of the run so far."""
        with self._stats_lock:
            return {
                'solved': self._solved,
                'reason': self._shutdown_reason,
                'env_step': self.env_step,
                'train_iter': self.train_iter,
                'learn_info_count': self.learn_info_count,
                'pushed_samples': self.pushed_samples,
                'sampled_batches': self.sampled_batches,
                'best_eval_return': self.best_eval_return,
                'policy_lag': dict(self.policy_lag),
                'stale_dropped': self.stale_dropped,
                'buffer_stale_removed': self.buffer_stale_removed
                + sum(int(getattr(b, 'staleness_remove_count', 0) or 0) for b in list(self._replay_buffer.values())),
                'failed_tasks': list(self.failed_tasks),
                'wall_time': (time.time() - self.start_time) if self.start_time else 0.0,
            }
