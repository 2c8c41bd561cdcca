"""``FlaskFileSystemCollector``: a comm collector served over HTTP (``ding.interaction``) that writes samples
to, and reads weights from, a shared directory (``ding.utils.file_transport``).

The coordinator drives it with four tasks (docs: PARALLEL_PROTOCOL.md)::

    resource             -> {'cpu', 'gpu'}
    collector_start_task -> build the task's parallel collector, start its thread
    collector_data_task  -> the metadata of the next chunk(s) of samples, or the finish info once the task ended
    collector_close_task -> stop the task, release its envs

The collector thread writes each chunk of samples as one file (``send_stepdata``) and puts the chunk's
metadata into a bounded queue (``send_metadata``, which waits while the queue is full: the collector
never runs far ahead of the coordinator). A data task takes what is queued; with nothing queued it waits
up to ``data_wait_second`` and then answers an empty chunk, so that a slow env never looks like a dead
collector. The process stays resident: after a task ended or was closed it accepts the next start task.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.config.errors import CONFIG_REFUSAL, ConfigError
from ding.interaction import TaskFail
from ding.utils.atomic_file import StorageError
from ding.utils.file_transport import save_samples, unique_stem
from ding.utils.registry import COMM_COLLECTOR_REGISTRY
from ding.worker.collector.base_parallel_collector import CollectorStopped
from ding.worker.comm_worker import SlaveHost
from ding.worker.replay_service import REPLAY_DATA_ID, replay_client_of
from ding.worker.task_fields import TaskFieldError

from .base_comm_collector import BaseCommCollector
from .collector_run import CollectorRun
from .collector_slave import CollectorSlave
from .utils import PolicyFileWatcher, check_collector_task, file_prefix, resource_info

# How often blocked queue operations wake up to see whether the task was closed (seconds).
_POLL_S = 0.05


@COMM_COLLECTOR_REGISTRY.register('flask_fs')
class FlaskFileSystemCollector(BaseCommCollector):
    """Comm collector over HTTP (a :class:`CollectorSlave`) and a shared file system.

    Config (``system.collector.<name>`` of the parallel config, completed by the parallel worker): ``name``,
    ``exp_name``, ``host``, ``port`` (0: a free one, see ``.port``), ``path_data`` / ``path_policy`` (used
    when a start task names none; one it names must lie inside them), ``allowed_import_names`` (what a start
    task may have it import; see ``ding.worker.task_fields``), ``seed`` (collector envs of the k-th task are seeded ``seed + 1000 * k``;
    evaluator envs always ``seed``), the slave's ``heartbeat_span``, ``request_retries``,
    ``request_retry_waiting``, ``request_timeout``, ``channel``, and ``queue_size`` (metadata chunks waiting
    for the coordinator before the collector pauses), ``data_wait_second`` (longest wait of a data task
    before it answers an empty chunk; keep it below the coordinator's ``collector_request_timeout``),
    ``stop_timeout`` (seconds a close waits for the collector thread).

    Use: ``comm = create_comm_collector(cfg); comm.start()`` (returns once serving), keep the process
    alive; ``comm.close()`` stops the running task and the server.
    """

    config = dict(
        type='flask_fs',
        import_names=['ding.worker.collector.comm.flask_fs_collector'],
        # Modules a start task may have this worker import (its policy's, env's, ...); the parallel worker
        # fills it from the run's local config. Any other import_names in a task is refused (task_fields).
        allowed_import_names=[],
        name='collector0',
        exp_name='default_experiment',
        host='127.0.0.1',
        port=None,
        path_data='./data',
        path_policy='./policy',
        seed=0,
        heartbeat_span=3.0,
        request_retries=5,
        request_retry_waiting=1.0,
        request_timeout=10.0,
        channel=0,
        queue_size=4,
        data_wait_second=5.0,
        stop_timeout=30.0,
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
        conf = self._cfg
        size = conf.queue_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f'comm collector {conf.name}: queue_size must be a positive integer, got {size!r}')
        for key in ('data_wait_second', 'stop_timeout'):
            value = conf[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f'comm collector {conf.name}: {key} must be a positive number, got {value!r}')
        self._run: CollectorRun | None = None
        self._lifecycle_lock = threading.RLock()  # start / close of tasks and of the comm collector
        self._watcher = PolicyFileWatcher()
        self._task_count = 0
        self._host = SlaveHost(self._cfg, 'comm collector')
        self._logger: Any = None
        self._closed = False

    # ---- service -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the slave (returns once it listens); collection starts with a start task. When the slave
        cannot start (e.g. the port is taken) the log is closed and the error raised."""
        self._logger = self._host.open_log()
        callbacks: dict[str, Callable[..., Any]] = {
            'deal_with_resource': self.deal_with_resource,
            'deal_with_collector_start': self.deal_with_collector_start,
            'deal_with_collector_data': self.deal_with_collector_data,
            'deal_with_collector_close': self.deal_with_collector_close,
            'deal_with_lost_master': self.deal_with_lost_master,
        }
        self._host.start(CollectorSlave, callbacks, release=self.kept_resources.close)
        super().start()

    def close(self) -> None:
        """Stop the running task, then the slave. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._lifecycle_lock:
            run = self._run
            if run is not None:
                self._stop_run(run, 'the comm collector was closed')
        self._host.close_slave()
        super().close()
        self._host.close_log()

    @property
    def port(self) -> int:
        """The port the slave listens on (the chosen one after ``start()`` with port 0)."""
        return self._host.port

    @property
    def slave(self) -> CollectorSlave | None:
        slave = self._host.slave
        return slave if isinstance(slave, CollectorSlave) else None

    @property
    def logger(self) -> Any:
        return self._logger

    @property
    def collector(self) -> Any:
        """The parallel collector of the current (or last) task, None before the first one."""
        run = self._run
        return run.collector if run is not None else None

    # ---- transport (called by the parallel collector, on its thread) ----------------------------------
    def _live_run(self) -> CollectorRun:
        run = self._run
        if run is None or run.ending.is_set():
            raise CollectorStopped()
        return run

    def send_stepdata(self, stepdata: list[dict[str, Any]]) -> list[str]:
        """Write one chunk of samples as one file in the task's ``path_data``, or insert it into the replay
        service (``replay_address``: retried until it succeeds or the task ends); return their data_ids."""
        run = self._live_run()
        if run.replay is not None:
            run.replay.push(stepdata)
            return [REPLAY_DATA_ID] * len(stepdata)
        try:
            return save_samples(run.path_data, unique_stem(run.prefix), stepdata)
        except OSError as exc:  # disk full, unwritable directory: every retry would write to the same place
            run.storage_error = (
                f'cannot write a sample file in {run.path_data} ({exc.strerror or exc}); '
                f'{len(stepdata)} samples were NOT saved'
            )
            self._logger.error(f'collector task {run.task_id}: {run.storage_error}')
            raise StorageError(run.storage_error, exc) from exc

    def send_metadata(self, metadata: list[dict[str, Any]]) -> None:
        """Queue one chunk of sample metadata for the coordinator; waits while the queue is full.

        Raises ``CollectorStopped`` (after removing the chunk's file) once the task was closed.
        """
        if isinstance(metadata, dict):
            metadata = [metadata]
        chunk = list(metadata)
        run = self._run
        while run is not None and not run.ending.is_set():
            try:
                run.queue.put(chunk, timeout=_POLL_S)
                return
            except queue.Full:
                continue
        if run is not None:
            run.drop(chunk)
        raise CollectorStopped()

    def get_policy_update_info(self, path: str) -> dict[str, Any] | None:
        """``{'model', 'iter'}`` of a policy file version not read yet, None if unchanged; ``FileNotFoundError``
        / ``CheckpointError`` naming the path when it is missing / bad (each version is reported once)."""
        return self._watcher.poll(path)

    # ---- coordinator side (slave task threads) -------------------------------------------------------
    def deal_with_resource(self) -> dict[str, int]:
        return resource_info()

    def deal_with_collector_start(self, task_info: dict[str, Any]) -> dict[str, Any]:
        """Build the task's parallel collector and start it; a task still running here is closed first."""
        task_id = task_info.get('task_id')
        if not isinstance(task_id, str) or not task_id:
            raise TaskFail(message="collector_start_task: task_info needs a non-empty string 'task_id'")
        cfg = self._cfg
        try:  # before anything stops, imports or writes
            policy_file, path_data = check_collector_task(cfg, task_info)
        except TaskFieldError as exc:
            self._logger.warning(f'collector_start_task {task_id}: {exc}')
            raise TaskFail({'task_id': task_id, 'field': exc.field}, f'collector_start_task {task_id}: {exc}') from exc
        with self._lifecycle_lock:
            if self._closed:
                raise TaskFail(message=f'collector_start_task {task_id}: the comm collector is closing')
            old = self._run
            if old is not None and not old.collector.finished:
                self._logger.warning(f'collector task {old.task_id} is still running: closing it for task {task_id}')
            if old is not None:
                self._stop_run(old, f'replaced by collector task {task_id}')
                if not old.collector.finished:
                    raise TaskFail(
                        message=f'collector_start_task {task_id}: the previous collector task '
                        f'{old.task_id} did not stop within {cfg.stop_timeout}s'
                    )
            info = dict(task_info)
            info['path_policy'], info['path_data'] = policy_file, path_data
            eval_flag = bool(task_info.get('eval_flag', False))
            info['seed'] = int(cfg.seed) + (0 if eval_flag else 1000 * self._task_count)
            self._watcher.forget()
            replay = None if eval_flag else self._replay_buffer(task_id, info)
            try:
                collector = self._create_collector(info, logger=self._logger)
            except Exception as exc:
                if replay is not None:
                    replay.close()
                self._logger.exception(f'collector_start_task {task_id}: cannot create the collector')
                # a config the task cannot run with fails on every collector: the coordinator ends the run
                refusal = {CONFIG_REFUSAL: True} if isinstance(exc, ConfigError) else {}
                raise TaskFail(
                    {'task_id': task_id, **refusal},
                    f'collector_start_task {task_id}: cannot create the collector: {type(exc).__name__}: {exc}',
                ) from exc
            instance = info.get('instance_name') or cfg.name
            run = CollectorRun(task_id, collector, info['path_data'], file_prefix(instance, task_id), cfg.queue_size)
            run.replay = replay
            self._run = run
            self._task_count += 1
            collector.start()
        kind = 'evaluation' if eval_flag else 'collect'
        destination = (
            f'samples to the replay service at {replay.address}'
            if replay is not None
            else f'data in {info["path_data"]}'
        )
        self._logger.info(f'{kind} task {task_id} started (policy file {info["path_policy"]}, {destination})')
        return {'message': 'collector task has started', 'task_id': task_id}

    def _replay_buffer(self, task_id: str, info: dict[str, Any]) -> Any:
        """The replay client a collect task inserts through (None: sample files), per the task's policy config."""
        try:
            replay_cfg = replay_client_of(info.get('policy'))
        except ConfigError as exc:
            raise TaskFail(
                {'task_id': task_id, CONFIG_REFUSAL: True}, f'collector_start_task {task_id}: {exc}'
            ) from exc
        if replay_cfg is None:
            return None
        from ding.worker.replay_service.remote_buffer import RemoteReplayBuffer  # deferred: the replay extra

        def log_retry(failures: int, error: str) -> None:
            self._logger.warning(f'replay service: insert failed ({failures} in a row, retrying): {error}')

        batch_size = int(info['policy'].get('learn', {}).get('batch_size', 1))
        return RemoteReplayBuffer(replay_cfg, batch_size, self._cfg.secret, on_insert_retry=log_retry)

    def _active_run(self, what: str, task_info: dict[str, Any]) -> CollectorRun:
        run = self._run
        task_id = task_info.get('task_id')
        if run is None:
            raise TaskFail(
                {'task_id': task_id}, f'{what}: no collector task is running; send collector_start_task first'
            )
        if task_id is not None and task_id != run.task_id:
            raise TaskFail(
                {'task_id': task_id}, f"{what}: task_id '{task_id}' is not the current collector task '{run.task_id}'"
            )
        if run.ending.is_set():
            raise TaskFail({'task_id': run.task_id}, f'{what}: collector task {run.task_id} was closed ({run.reason})')
        return run

    def deal_with_collector_data(self, task_info: dict[str, Any]) -> dict[str, Any]:
        """The metadata queued so far (waiting for the first chunk up to ``data_wait_second``), or the finish
        info once the task has ended and everything was handed over; fails if the task failed."""
        run = self._active_run('collector_data_task', task_info)
        collector = run.collector
        deadline = time.monotonic() + float(self._cfg.data_wait_second)
        slave = self._host.slave
        while True:
            # Read the flag before the queue: a chunk queued before the thread ended is then seen below.
            finished = collector.finished
            try:
                chunk = run.queue.get_nowait() if finished else run.queue.get(timeout=_POLL_S)
            except queue.Empty:
                if finished:
                    return run.finish_answer()
                if run.ending.is_set():
                    raise TaskFail(
                        {'task_id': run.task_id},
                        f'collector_data_task: collector task {run.task_id} was closed ({run.reason})',
                    ) from None
                if time.monotonic() >= deadline or (slave is not None and not slave.is_running):
                    return {'task_id': run.task_id, 'data': []}
                continue
            return {'task_id': run.task_id, 'data': run.hand_over(chunk)}

    def deal_with_collector_close(self, task_info: dict[str, Any]) -> dict[str, Any]:
        """Stop the task (if still running) and release its envs; answers its finish info."""
        task_id = task_info.get('task_id')
        with self._lifecycle_lock:
            run = self._run
            if run is None:
                return {'message': 'no collector task to close', 'task_id': task_id}
            if task_id is not None and task_id != run.task_id:
                raise TaskFail(
                    {'task_id': task_id},
                    f"collector_close_task: task_id '{task_id}' is not the current collector task '{run.task_id}'",
                )
            self._stop_run(run, 'closed by the coordinator')
            finish_info = run.collector.get_finish_info()
        self._logger.info(
            f'collector task {run.task_id} closed: {finish_info.get("step_count")} env steps, '
            f'{run.sent_samples} samples handed over, {run.dropped_samples} dropped'
        )
        return {'message': 'collector task has closed', 'task_id': run.task_id, 'finish_info': finish_info}

    def deal_with_lost_master(self, reason: str) -> None:
        """The coordinator is gone: stop collecting (nobody would take the data). Returns at once."""
        run = self._run
        if run is not None and not run.ending.is_set():
            run.reason = reason
            run.ending.set()
            run.close_replay()
            run.collector.close(timeout=0)
            if self._logger is not None:
                self._logger.warning(f'collector task {run.task_id} stopped: {reason}')

    def _stop_run(self, run: CollectorRun, reason: str) -> None:
        """Stop the task's thread (``stop_timeout``) and remove the files of chunks nobody received."""
        if not run.ending.is_set():
            run.reason = reason
            run.ending.set()
        run.close_replay()
        if not run.collector.close(timeout=float(self._cfg.stop_timeout)):
            self._logger.error(f'collector task {run.task_id} did not stop within {self._cfg.stop_timeout}s')
        run.discard_queued()


__all__ = ['FlaskFileSystemCollector', 'CollectorSlave']
