"""The network side of the coordinator: owns the interaction ``Master``, keeps a connection to every
learner and collector, and runs each assigned task as a sequence of requests to its worker."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ding.utils.learn_task_layout import COLUMNS_LAYOUT, JSON_SCALAR_TYPES

from .resource_manager import NaiveResourceManager

WORKER_KINDS = ('learner', 'collector')
# Outcomes of one request to a worker (see CommCoordinator._request).
OK, CLOSING, LOST, FAILED = 'ok', 'closing', 'lost', 'failed'


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types for task payloads: numpy / torch scalars and arrays become numbers and lists."""
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return obj
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, 'tolist'):  # numpy arrays/scalars and torch tensors
        return to_jsonable(obj.tolist())
    if hasattr(obj, 'item'):
        return obj.item()
    raise TypeError(f'cannot send a {type(obj).__name__} to a worker: {obj!r}')


def learn_task_payload(demand: dict[str, Any], batches: list[list[dict[str, Any]]]) -> Any:
    """The JSON-ready ``data`` of the learn task that answers ``demand`` with ``batches`` (lists of metadata).

    The list of batches for a ``num_batches`` demand, else its one batch. Each batch is a list of metadata
    dicts (DI-engine's layout), or, for a demand that opts in to columns, one dict of the requested fields'
    columns: ``{field: [the value of each sample]}``, None where a sample lacks the field; a field that no
    sample has is left out.
    """
    fields = _requested_columns(demand)
    if fields is None:
        payload = to_jsonable(batches)
    else:
        payload = [_metadata_columns(batch, fields) for batch in batches]
    return payload if 'num_batches' in demand else payload[0]


def _requested_columns(demand: dict[str, Any]) -> list[str] | None:
    """The fields a demand asks for as columns; None for a demand without the opt-in (or a malformed one,
    which then gets the lists of dicts every learner understands)."""
    if demand.get('layout') != COLUMNS_LAYOUT:
        return None
    fields = demand.get('fields')
    if not isinstance(fields, list) or not fields or not all(isinstance(f, str) for f in fields):
        return None
    return list(dict.fromkeys(fields))


def _metadata_columns(batch: list[dict[str, Any]], fields: list[str]) -> dict[str, list[Any]]:
    columns = {}
    for field in fields:
        column = [meta.get(field) for meta in batch]
        if batch and column.count(None) == len(column):
            continue  # no sample has it: left out, not a column of None
        if not set(map(type, column)) <= JSON_SCALAR_TYPES:  # e.g. numpy scalars
            column = to_jsonable(column)
        columns[field] = column
    return columns


class _Worker:
    """One configured learner or collector: where it listens and its current connection (None if down)."""

    def __init__(self, kind: str, name: str, host: str, port: int) -> None:
        self.kind = kind
        self.name = name
        self.host = host
        self.port = int(port)
        self.conn: Any = None
        self.lost = False  # it was connected once and then lost
        self.last_error = ''
        self.failed_attempts = 0
        self.retry_at = 0.0  # no connection attempt before this time (after a loss)

    def __repr__(self) -> str:
        return f'{self.kind} {self.name} ({self.host}:{self.port})'


def _parse_worker_entries(kind: str, entries: Any) -> dict[str, tuple[str, int]]:
    """``{name: [name, host, port]}`` (DI-engine) or ``{name: {host, port}}`` -> ``{name: (host, port)}``."""
    out: dict[str, tuple[str, int]] = {}
    for key, entry in (entries or {}).items():
        if isinstance(entry, (list, tuple)) and len(entry) == 3:
            name, host, port = entry
        elif isinstance(entry, dict) and 'host' in entry and 'port' in entry:
            name, host, port = key, entry['host'], entry['port']
        else:
            raise ValueError(
                f"coordinator config: {kind} '{key}' must be [name, host, port] or {{host, port}}, got {entry!r}"
            )
        if isinstance(port, bool) or not isinstance(port, int):
            raise ValueError(
                f"coordinator config: {kind} '{key}' port must be an int, got {port!r} "
                f"(run parallel_transform to fill 'auto' ports)"
            )
        out[str(name)] = (str(host), port)
    return out


class CommCoordinator:
    """Connections to workers and the request sequences of tasks.

    Workers come from ``cfg.learner`` / ``cfg.collector`` (``{name: [name, host, port]}``). A background
    thread connects to every worker that is not connected (at start, and again after it was lost), asks
    for its resources and marks it idle in the resource manager. A worker is *lost* when the master
    drops it (no heartbeat for ``heartbeat_tolerance`` s), when one of its requests fails or exceeds the
    request timeout, or when the pipeline reports its process dead; its running task is then reported
    through the ``deal_with_*_fail_task`` callback (the coordinator gives it to another worker).
    """

    def __init__(
        self,
        cfg: dict[str, Any],
        callback_fn: dict[str, Callable],
        logger: Any,
        system_cfg: dict[str, Any] | None = None,
    ) -> None:
        self._cfg = cfg
        self._callback_fn = callback_fn
        self._logger = logger
        self._system_cfg = system_cfg or {}
        self._end_flag = True
        self._closed = False
        self._master: Any = None
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._resource_manager = NaiveResourceManager()
        self._workers: dict[str, dict[str, _Worker]] = {k: {} for k in WORKER_KINDS}
        for kind in WORKER_KINDS:
            for name, (host, port) in _parse_worker_entries(kind, cfg.get(kind, {})).items():
                self._workers[kind][name] = _Worker(kind, name, host, port)
        self._learner_request_timeout = float(cfg.get('learner_request_timeout', 30))
        self._collector_request_timeout = float(cfg.get('collector_request_timeout', 30))
        self._reconnect_interval = float(cfg.get('reconnect_interval', 0.5))
        self._remain_task_lock = threading.Lock()
        self._remain_tasks: dict[str, threading.Thread] = {}
        self._connect_thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the master and the thread that connects to the workers (returns at once)."""
        from ding.interaction import Master

        cfg = self._cfg
        self._end_flag = False
        self._master = Master(
            cfg.get('host', '127.0.0.1'),
            int(cfg.get('port', 0)),
            heartbeat_tolerance=float(cfg.get('heartbeat_tolerance', 15.0)),
            heartbeat_check_span=float(cfg.get('heartbeat_check_span', 0.5)),
            request_retries=int(cfg.get('request_retries', 1)),
            request_retry_waiting=float(cfg.get('request_retry_waiting', 0.2)),
            channel=int(cfg.get('channel', 0)),
            my_address=cfg.get('my_address', None),
        )
        self._master.start()
        self._connect_thread = threading.Thread(target=self._connect_loop, name='coordinator_connect', daemon=True)
        self._connect_thread.start()
        self._logger.info(f'[CommCoordinator] master listening on {self._master.address}')

    def stop_requests(self) -> None:
        """From now on every request returns at once (CLOSING); ``close()`` does the rest."""
        self._end_flag = True
        self._wake.set()

    def close(self) -> None:
        """Close running tasks on their workers (best effort), disconnect, stop the master. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._end_flag = True
        self._wake.set()
        if self._connect_thread is not None:
            self._connect_thread.join(timeout=5)
        deadline = time.time() + 5
        with self._remain_task_lock:
            threads = list(self._remain_tasks.values())
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.time()))
        if self._master is not None:
            self._master.close()  # disconnects every slave (best effort) and fails what is still in flight
        self._logger.info('[CommCoordinator] closed')

    @property
    def master(self) -> Any:
        return self._master

    @property
    def resource_manager(self) -> NaiveResourceManager:
        return self._resource_manager

    def connected_workers(self, kind: str) -> list[str]:
        with self._lock:
            return [n for n, w in self._workers[kind].items() if w.conn is not None]

    def wait_connected(self, timeout: float) -> bool:
        """Block until every configured worker is connected (True) or ``timeout`` passes (False)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self._lock:
                if all(w.conn is not None for ws in self._workers.values() for w in ws.values()):
                    return True
            time.sleep(0.05)
        return False

    # ---- connections -----------------------------------------------------------------------------
    def update_worker_address(self, kind: str, name: str, host: str, port: int) -> None:
        """Connect to ``name`` at a new address from now on (e.g. a restarted worker on another port)."""
        with self._lock:
            worker = self._workers[kind].get(name)
            if worker is None:
                worker = self._workers[kind][name] = _Worker(kind, name, host, port)
            worker.host, worker.port = host, int(port)
        self.notify_worker_dead(kind, name)

    def notify_worker_dead(self, kind: str, name: str) -> None:
        """Drop the connection to ``name`` now: its running task fails and goes to another worker."""
        self._lose_worker(kind, name, 'the worker process exited')

    def _connect_loop(self) -> None:
        while not self._end_flag:
            with self._lock:
                workers = [w for ws in self._workers.values() for w in ws.values()]
            for worker in workers:
                if self._end_flag:
                    break
                conn = worker.conn
                if conn is not None and not conn.is_connected:
                    # The master dropped it (heartbeats stopped) while no task noticed.
                    self._lose_worker(worker.kind, worker.name, 'connection dropped by the master (no heartbeat)', conn)
                elif conn is None and time.time() >= worker.retry_at:
                    self._try_connect(worker)
            self._wake.wait(self._reconnect_interval)
            self._wake.clear()

    def _try_connect(self, worker: _Worker) -> bool:
        from ding.interaction.master.task import TaskStatus

        try:
            conn = self._master.new_connection(worker.name, worker.host, worker.port)
            conn.connect()
        except Exception as exc:  # not up yet, or gone: the next round tries again
            worker.failed_attempts += 1
            if worker.failed_attempts == 1 or worker.failed_attempts % 60 == 0:
                self._logger.info(f'[CommCoordinator] cannot connect to {worker} yet: {exc}')
            worker.last_error = str(exc)
            return False
        task = conn.new_task({'name': 'resource'}, timeout=10.0).start().join()
        if task.status != TaskStatus.TASK_COMPLETED:
            self._logger.error(f'[CommCoordinator] {worker}: resource task failed: {task.result}')
            self._disconnect(conn)
            worker.retry_at = time.time() + self._reconnect_interval
            return False
        with self._lock:
            if self._end_flag:
                self._disconnect(conn)
                return False
            worker.conn = conn
            worker.failed_attempts = 0
            was_lost, worker.lost = worker.lost, False
        self._resource_manager.update(worker.kind, worker.name, dict(task.result or {}))
        self._logger.info(f'[CommCoordinator] connected to {worker}' + (' again' if was_lost else ''))
        if was_lost and worker.kind == 'collector':
            self._callback_fn['deal_with_increase_collector']()
        self._callback_fn['deal_with_worker_change']()
        return True

    def _disconnect(self, conn: Any) -> None:
        try:
            conn.disconnect()
        except Exception as exc:  # it refused or is unreachable: the master drops it locally anyway
            self._logger.info(f'[CommCoordinator] disconnect from {conn.name}: {exc}')

    def _lose_worker(self, kind: str, name: str, reason: str, conn: Any = None) -> None:
        """Forget the worker's connection (only if it is still ``conn``, when given) and fail its tasks."""
        with self._lock:
            worker = self._workers[kind].get(name)
            if worker is None or worker.conn is None or (conn is not None and worker.conn is not conn):
                return
            conn, worker.conn = worker.conn, None
            worker.lost = True
            worker.retry_at = time.time() + self._reconnect_interval
        self._resource_manager.delete(kind, name)
        self._logger.error(f'[CommCoordinator] lost {worker}: {reason}')
        # Disconnecting fails the tasks in flight on this connection, which wakes their threads.
        self._disconnect(conn)
        if kind == 'collector':
            self._callback_fn['deal_with_decrease_collector']()
        self._wake.set()
        self._callback_fn['deal_with_worker_change']()

    # ---- requests --------------------------------------------------------------------------------
    def _start_remote_task(
        self,
        kind: str,
        task: dict[str, Any],
        assigned: dict[str, Any],
        worker: _Worker,
        conn: Any,
        task_info: dict[str, Any],
        timeout: float,
    ) -> tuple[bool | None, dict[str, Any]]:
        """Send ``{kind}_start_task``; return ``(None, result)`` once it started, else what the sender returns.

        False: no worker took it (closing, or the worker is gone). True: the worker refused it, and the
        task was reported failed.
        """
        task_id, name = task['task_id'], worker.name
        outcome, result = self._request(
            worker, conn, {'name': f'{kind}_start_task', 'task_info': to_jsonable(task_info)}, timeout
        )
        if outcome == CLOSING:
            return False, result
        if outcome == LOST:
            self._lose_worker(kind, name, f'start of {task_id} failed: {result.get("message")}', conn)
            return False, result
        task.update(assigned)
        if outcome == FAILED:
            self._logger.error(f'[CommCoordinator] {name} refused {kind} task {task_id}: {result.get("message")}')
            self._task_failed(kind, task, worker, conn, FAILED, f'{kind}_start_task', result)
            return True, result
        self._logger.info(f'[CommCoordinator] {kind} task {task_id} started on {name}')
        return None, result

    def _request(self, worker: _Worker, conn: Any, data: dict[str, Any], timeout: float) -> tuple[str, dict[str, Any]]:
        """Run one task on ``conn`` and classify the outcome.

        ``(OK, result)``; ``(CLOSING, {})`` when the coordinator closes meanwhile; ``(LOST, failure)`` when
        the worker could not be reached, was dropped (heartbeats) or did not answer within ``timeout``;
        ``(FAILED, failure)`` when the worker ran the task and reported a failure.
        """
        from ding.interaction.master.task import TaskStatus

        if conn is None or worker.conn is not conn:
            return LOST, {'message': f'{worker.name} is not connected'}
        started = time.monotonic()
        try:
            task = conn.new_task(data, timeout=timeout).start()
        except TypeError as exc:
            return FAILED, {'message': f'task data cannot be sent: {exc}'}
        while not task.is_done():
            if self._end_flag:
                return CLOSING, {}
            task.join(0.25)
        result = dict(task.result or {})
        if task.status == TaskStatus.TASK_COMPLETED:
            return OK, result
        result.setdefault('message', 'task failed')
        if task.error is not None or not conn.is_connected or time.monotonic() - started >= timeout:
            return LOST, result
        return FAILED, result

    def _close_on_worker(
        self, worker: _Worker, conn: Any, name: str, task_id: str, timeout: float = 5.0
    ) -> dict[str, Any]:
        """Send a close task; used at the normal end of a task, after a failed one and (shorter) at shutdown."""
        from ding.interaction.master.task import TaskStatus

        if conn is None or not conn.is_connected:
            return {}
        try:
            task = conn.new_task({'name': name, 'task_info': {'task_id': task_id}}, timeout=timeout).start()
            task.join(timeout + 1.0)
        except Exception as exc:
            self._logger.info(f'[CommCoordinator] {name} for {task_id} on {worker.name}: {exc}')
            return {}
        return dict(task.result or {}) if task.status == TaskStatus.TASK_COMPLETED else {}

    def _track(self, task_id: str, target: Callable, args: tuple, name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._remain_task_lock:
            self._remain_tasks[task_id] = thread
        thread.start()

    def _untrack(self, task_id: str) -> None:
        with self._remain_task_lock:
            self._remain_tasks.pop(task_id, None)

    def _path(self, worker: _Worker, key: str) -> str:
        # A worker on another machine may mount the shared directory elsewhere: its own entry wins.
        entry = (self._system_cfg.get(worker.kind) or {}).get(worker.name) or {}
        if isinstance(entry, dict) and entry.get(key):
            return entry[key]
        return self._system_cfg.get(key, f'./{key}')

    def _task_failed(
        self,
        kind: str,
        task: dict[str, Any],
        worker: _Worker,
        conn: Any,
        outcome: str,
        what: str,
        result: dict[str, Any],
        close_name: str | None = None,
    ) -> None:
        """A request of ``task`` did not succeed: drop a lost worker, or free a live one; report the task."""
        reason = f'{what} on {worker.name}: {result.get("message")}'
        if outcome == LOST:
            self._lose_worker(kind, worker.name, reason, conn)
        else:
            # The worker is alive and answered: end the broken task there and let it take new ones.
            if close_name is not None:
                self._close_on_worker(worker, conn, close_name, task['task_id'], timeout=2.0)
            self._resource_manager.release(kind, worker.name)
            self._callback_fn['deal_with_worker_change']()
        self._callback_fn[f'deal_with_{kind}_fail_task'](task, reason)

    # ---- learner tasks ---------------------------------------------------------------------------
    def send_learner_task(self, learner_task: dict[str, Any]) -> bool:
        """Hand ``learner_task`` to an idle learner and start it.

        True when the task left the caller's hands: it started (and runs in its own thread), or the
        learner ran and refused it (reported through ``deal_with_learner_fail_task``). False when no
        learner could take it now (none idle, or the chosen one turned out to be gone).
        """
        task_id = learner_task['task_id']
        assigned = self._resource_manager.assign_learner(learner_task)
        if assigned is None:
            return False
        name = assigned['learner_id']
        with self._lock:
            worker = self._workers['learner'][name]
            conn = worker.conn
        task_info = {k: v for k, v in learner_task.items() if k not in ('replay_buffer_cfg', 'resource_info')}
        task_info.update(
            {
                'learner_id': name,
                'instance_name': name,
                'path_policy': self._path(worker, 'path_policy'),
                'path_data': self._path(worker, 'path_data'),
            }
        )
        task_info.setdefault('resume', None)
        started_ok, result = self._start_remote_task(
            'learner', learner_task, assigned, worker, conn, task_info, self._learner_request_timeout
        )
        if started_ok is not None:
            return started_ok
        started = self._callback_fn.get('deal_with_learner_started')
        if started is not None:  # e.g. the learner's weights address for collectors (run service)
            started(learner_task, result)
        self._track(task_id, self._execute_learner_task, (learner_task, worker, conn), f'learner_task_{name}')
        return True

    def _execute_learner_task(self, learner_task: dict[str, Any], worker: _Worker, conn: Any) -> None:
        task_id, buffer_id = learner_task['task_id'], learner_task['buffer_id']
        timeout = self._learner_request_timeout
        cb = self._callback_fn
        finished = False
        try:
            while not self._end_flag:
                outcome, demand = self._request(
                    worker, conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': task_id}}, timeout
                )
                if outcome == CLOSING:
                    break
                if outcome != OK:
                    self._task_failed(
                        'learner',
                        learner_task,
                        worker,
                        conn,
                        outcome,
                        'learner_get_data_task',
                        demand,
                        'learner_close_task',
                    )
                    return
                batch_size = int(demand['batch_size'])
                cur_iter = int(demand.get('cur_learner_iter', 0))
                num_batches = int(demand.get('num_batches', 1))
                batches: list[Any] = []
                while len(batches) < num_batches and not self._end_flag:
                    if worker.conn is not conn:
                        self._task_failed(
                            'learner',
                            learner_task,
                            worker,
                            conn,
                            LOST,
                            'waiting for data',
                            {'message': 'connection lost'},
                        )
                        return
                    data = cb['deal_with_learner_get_data'](task_id, buffer_id, batch_size, cur_iter)
                    if data is None:
                        cb['wait_for_data'](0.1)
                        continue
                    batches.append(data)
                if self._end_flag:
                    break
                payload = learn_task_payload(demand, batches)
                learn_info = {'task_id': task_id}
                extra = cb.get('learner_task_extra')
                if extra is not None:  # run service: e.g. a learning-rate tune, applied between iterations
                    learn_info.update(extra(task_id) or {})
                outcome, result = self._request(
                    worker, conn, {'name': 'learner_learn_task', 'task_info': learn_info, 'data': payload}, timeout
                )
                if outcome == CLOSING:
                    break
                if outcome != OK:
                    self._task_failed(
                        'learner',
                        learner_task,
                        worker,
                        conn,
                        outcome,
                        'learner_learn_task',
                        result,
                        'learner_close_task',
                    )
                    return
                infos = result.get('infos')
                if not isinstance(infos, list):
                    infos = [result.get('info', result)]
                done = False
                for info in infos:
                    if cb['deal_with_learner_judge_finish'](task_id, info):
                        done = True
                    cb['deal_with_learner_send_info'](task_id, buffer_id, info)
                if done:
                    closed = self._close_on_worker(worker, conn, 'learner_close_task', task_id)
                    closed.setdefault('buffer_id', buffer_id)
                    self._resource_manager.release('learner', worker.name)
                    finished = True
                    cb['deal_with_learner_finish_task'](task_id, closed)
                    cb['deal_with_worker_change']()
                    return
        finally:
            if not finished and self._end_flag:
                self._close_on_worker(worker, conn, 'learner_close_task', task_id, timeout=2.0)
            self._untrack(task_id)

    # ---- collector tasks -------------------------------------------------------------------------
    def send_collector_task(self, collector_task: dict[str, Any]) -> bool:
        """Hand ``collector_task`` to an idle collector and start it (return value as ``send_learner_task``)."""
        task_id = collector_task['task_id']
        assigned = self._resource_manager.assign_collector(collector_task)
        if assigned is None:
            return False
        name = assigned['collector_id']
        with self._lock:
            worker = self._workers['collector'][name]
            conn = worker.conn
        policy_dir = self._path(worker, 'path_policy')
        task_info = {k: v for k, v in collector_task.items() if k != 'resource_info'}
        task_info.update(
            {
                'collector_id': name,
                'instance_name': name,
                'path_policy': os.path.join(policy_dir, f'{collector_task["policy_name"]}.safetensors'),
                'path_data': self._path(worker, 'path_data'),
            }
        )
        started_ok, _ = self._start_remote_task(
            'collector', collector_task, assigned, worker, conn, task_info, self._collector_request_timeout
        )
        if started_ok is not None:
            return started_ok
        self._track(task_id, self._execute_collector_task, (collector_task, worker, conn), f'collector_task_{name}')
        return True

    def _execute_collector_task(self, collector_task: dict[str, Any], worker: _Worker, conn: Any) -> None:
        task_id, buffer_id = collector_task['task_id'], collector_task['buffer_id']
        timeout = self._collector_request_timeout
        cb = self._callback_fn
        finished = False
        paced = not collector_task.get('eval_flag', False)
        try:
            while not self._end_flag:
                if paced:
                    # Hold the collector back while it is too far ahead of the learner (its own queue then
                    # fills and it stops stepping its envs); the heartbeats keep the link alive meanwhile.
                    while not cb['wait_collect_budget']() and not self._end_flag and worker.conn is conn:
                        pass
                    if self._end_flag:
                        break
                outcome, result = self._request(
                    worker, conn, {'name': 'collector_data_task', 'task_info': {'task_id': task_id}}, timeout
                )
                if outcome == CLOSING:
                    break
                if outcome != OK:
                    self._task_failed(
                        'collector',
                        collector_task,
                        worker,
                        conn,
                        outcome,
                        'collector_data_task',
                        result,
                        'collector_close_task',
                    )
                    return
                if 'finish_info' in result:
                    finish_info = dict(result['finish_info'])
                    finish_info.setdefault('eval_flag', bool(collector_task.get('eval_flag', False)))
                    finish_info.setdefault('collector_done', True)
                    if not cb['deal_with_collector_judge_finish'](task_id, finish_info):
                        continue
                    self._close_on_worker(worker, conn, 'collector_close_task', task_id)
                    self._resource_manager.release('collector', worker.name)
                    finished = True
                    cb['deal_with_collector_finish_task'](task_id, finish_info)
                    cb['deal_with_worker_change']()
                    return
                data = result.get('data')
                if isinstance(data, dict):
                    data = [data]
                if data:
                    cb['deal_with_collector_send_data'](task_id, buffer_id, data)
        finally:
            if not finished and self._end_flag:
                self._close_on_worker(worker, conn, 'collector_close_task', task_id, timeout=2.0)
            self._untrack(task_id)
