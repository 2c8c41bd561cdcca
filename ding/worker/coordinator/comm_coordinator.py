"""The network side of the coordinator: runs each assigned task as a sequence of requests to its worker
(the links to the workers themselves are :class:`~ding.worker.coordinator.worker_links.WorkerLinks`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ding.config.errors import CONFIG_REFUSAL
from ding.interaction import HttpLimits
from ding.utils.atomic_file import STORAGE_REFUSAL
from ding.utils.jsonable import to_jsonable
from ding.utils.tls import TlsSettings

from .group_tasks import GroupTasks
from .learn_task_payload import learn_task_payload
from .resource_manager import NaiveResourceManager
from .worker_links import CLOSING, FAILED, LOST, OK, WorkerLink, WorkerLinks


class CommCoordinator:
    """Connections to workers and the request sequences of tasks.

    Workers come from ``cfg.learner`` / ``cfg.collector`` (``{name: [name, host, port]}``); the links keep
    them connected (see :class:`WorkerLinks`). When a worker is lost, its running task is reported through
    the ``deal_with_*_fail_task`` callback (the coordinator gives it to another worker).
    """

    def __init__(
        self,
        cfg: dict[str, Any],
        callback_fn: dict[str, Callable],
        logger: Any,
        system_cfg: dict[str, Any] | None = None,
        secret: str | None = None,
    ) -> None:
        self._callback_fn = callback_fn
        self._logger = logger
        self._system_cfg = system_cfg or {}
        self._closed = False
        # Callbacks are looked up when called: a caller may leave out the ones its workers never trigger.
        self._links = WorkerLinks(
            cfg,
            logger,
            on_change=lambda: callback_fn['deal_with_worker_change'](),
            on_collector_gained=lambda: callback_fn['deal_with_increase_collector'](),
            on_collector_lost=lambda: callback_fn['deal_with_decrease_collector'](),
            secret=secret,
            on_squatted=callback_fn.get('deal_with_worker_squatted'),
            tls=TlsSettings.from_config(self._system_cfg.get('tls')),  # system.tls
            limits=HttpLimits.from_config(self._system_cfg.get('http')),  # system.http
        )
        self._learner_request_timeout = float(cfg.get('learner_request_timeout', 30))
        self._collector_request_timeout = float(cfg.get('collector_request_timeout', 30))
        self._remain_task_lock = threading.Lock()
        self._remain_tasks: dict[str, threading.Thread] = {}
        self._group_tasks = GroupTasks(
            self._links,
            callback_fn,
            logger,
            self._system_cfg,
            self._path,
            self._track,
            self._learner_request_timeout,
        )

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the master and the thread that connects to the workers (returns at once)."""
        self._links.start()

    def stop_requests(self) -> None:
        """From now on every request returns at once (CLOSING); ``close()`` does the rest."""
        self._links.stop()

    def close(self) -> None:
        """Close running tasks on their workers (best effort), disconnect, stop the master. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._links.stop()
        self._links.join(timeout=5)
        deadline = time.time() + 5
        with self._remain_task_lock:
            threads = list(self._remain_tasks.values())
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.time()))
        self._links.close_master()
        self._logger.info('[CommCoordinator] closed')

    @property
    def _closing(self) -> bool:
        return self._links.closing

    @property
    def master(self) -> Any:
        return self._links.master

    @property
    def resource_manager(self) -> NaiveResourceManager:
        return self._links.resource_manager

    def connected_workers(self, kind: str) -> list[str]:
        return self._links.connected_workers(kind)

    def wait_connected(self, timeout: float) -> bool:
        """Block until every configured worker is connected (True) or ``timeout`` passes (False)."""
        return self._links.wait_connected(timeout)

    def update_worker_address(self, kind: str, name: str, host: str, port: int) -> None:
        """Connect to ``name`` at a new address from now on (e.g. a restarted worker on another port)."""
        self._links.update_worker_address(kind, name, host, port)

    def notify_worker_dead(self, kind: str, name: str) -> None:
        """Drop the connection to ``name`` now: its running task fails and goes to another worker."""
        self._links.lose_worker(kind, name, 'the worker process exited')

    # ---- requests --------------------------------------------------------------------------------
    def _start_remote_task(
        self,
        kind: str,
        task: dict[str, Any],
        assigned: dict[str, Any],
        worker: WorkerLink,
        conn: Any,
        task_info: dict[str, Any],
        timeout: float,
    ) -> tuple[bool | None, dict[str, Any]]:
        """Send ``{kind}_start_task``; return ``(None, result)`` once it started, else what the sender returns.

        False: no worker took it (closing, or the worker is gone). True: the worker refused it, and the
        task was reported failed.
        """
        task_id, name = task['task_id'], worker.name
        outcome, result = self._links.request(
            worker, conn, {'name': f'{kind}_start_task', 'task_info': to_jsonable(task_info)}, timeout
        )
        if outcome == CLOSING:
            return False, result
        if outcome == LOST:
            self._links.lose_worker(kind, name, f'start of {task_id} failed: {result.get("message")}', conn)
            return False, result
        task.update(assigned)
        if outcome == FAILED:
            self._logger.error(f'[CommCoordinator] {name} refused {kind} task {task_id}: {result.get("message")}')
            self._task_failed(kind, task, worker, conn, FAILED, f'{kind}_start_task', result)
            return True, result
        self._logger.info(f'[CommCoordinator] {kind} task {task_id} started on {name}')
        return None, result

    def _track(self, task_id: str, target: Callable, args: tuple, name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._remain_task_lock:
            self._remain_tasks[task_id] = thread
        thread.start()

    def _untrack(self, task_id: str) -> None:
        with self._remain_task_lock:
            self._remain_tasks.pop(task_id, None)

    def _path(self, worker: WorkerLink, key: str) -> str:
        # A worker on another machine may mount the shared directory elsewhere: its own entry wins.
        entry = (self._system_cfg.get(worker.kind) or {}).get(worker.name) or {}
        if isinstance(entry, dict) and entry.get(key):
            return entry[key]
        return self._system_cfg.get(key, f'./{key}')

    def _task_failed(
        self,
        kind: str,
        task: dict[str, Any],
        worker: WorkerLink,
        conn: Any,
        outcome: str,
        what: str,
        result: dict[str, Any],
        close_name: str | None = None,
    ) -> None:
        """A request of ``task`` did not succeed: drop a lost worker, or free a live one; report the task."""
        reason = f'{what} on {worker.name}: {result.get("message")}'
        if outcome == LOST:
            self._links.lose_worker(kind, worker.name, reason, conn)
        else:
            # The worker is alive and answered: end the broken task there and let it take new ones.
            if close_name is not None:
                self._links.close_on_worker(worker, conn, close_name, task['task_id'], timeout=2.0)
            self._links.resource_manager.release(kind, worker.name)
            self._callback_fn['deal_with_worker_change']()
        if result.get(CONFIG_REFUSAL) is True:  # refused for its config: retrying elsewhere cannot help
            self._callback_fn[f'deal_with_{kind}_fail_task'](task, reason, config_error=True)
        elif result.get(STORAGE_REFUSAL) is True:  # the disk refused a file: a retry would write there again
            self._callback_fn[f'deal_with_{kind}_fail_task'](task, reason, storage_error=True)
        else:
            self._callback_fn[f'deal_with_{kind}_fail_task'](task, reason)

    # ---- learner tasks ---------------------------------------------------------------------------
    def send_learner_task(self, learner_task: dict[str, Any]) -> bool:
        """Hand ``learner_task`` to an idle learner and start it.

        True when the task left the caller's hands: it started (and runs in its own thread), or the
        learner ran and refused it (reported through ``deal_with_learner_fail_task``). False when no
        learner could take it now (none idle, or the chosen one turned out to be gone).
        """
        task_id = learner_task['task_id']
        make_group = self._callback_fn.get('learner_group')
        group = make_group(learner_task) if make_group is not None else None
        if group is not None:  # data-parallel learners: every learner takes the task as one rank
            multi_cfg = (learner_task.get('learner_cfg') or {}).get('multi_learner') or {}
            return self._group_tasks.send(learner_task, group, dict(multi_cfg))
        assigned = self._links.resource_manager.assign_learner(learner_task)
        if assigned is None:
            return False
        name = assigned['learner_id']
        worker, conn = self._links.worker('learner', name)
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

    def _execute_learner_task(self, learner_task: dict[str, Any], worker: WorkerLink, conn: Any) -> None:
        task_id, buffer_id = learner_task['task_id'], learner_task['buffer_id']
        timeout = self._learner_request_timeout
        cb = self._callback_fn
        finished = False
        try:
            while not self._closing:
                outcome, demand = self._links.request(
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
                while len(batches) < num_batches and not self._closing:
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
                if self._closing:
                    break
                payload = learn_task_payload(demand, batches)
                learn_info = {'task_id': task_id}
                extra = cb.get('learner_task_extra')
                if extra is not None:  # run service: e.g. a learning-rate tune, applied between iterations
                    learn_info.update(extra(task_id) or {})
                outcome, result = self._links.request(
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
                    closed = self._links.close_on_worker(worker, conn, 'learner_close_task', task_id)
                    closed.setdefault('buffer_id', buffer_id)
                    self._links.resource_manager.release('learner', worker.name)
                    finished = True
                    cb['deal_with_learner_finish_task'](task_id, closed)
                    cb['deal_with_worker_change']()
                    return
        finally:
            if not finished and self._closing:
                self._links.close_on_worker(worker, conn, 'learner_close_task', task_id, timeout=2.0)
            self._untrack(task_id)

    # ---- collector tasks -------------------------------------------------------------------------
    def send_collector_task(self, collector_task: dict[str, Any]) -> bool:
        """Hand ``collector_task`` to an idle collector and start it (return value as ``send_learner_task``)."""
        task_id = collector_task['task_id']
        assigned = self._links.resource_manager.assign_collector(collector_task)
        if assigned is None:
            return False
        name = assigned['collector_id']
        worker, conn = self._links.worker('collector', name)
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

    def _execute_collector_task(self, collector_task: dict[str, Any], worker: WorkerLink, conn: Any) -> None:
        task_id, buffer_id = collector_task['task_id'], collector_task['buffer_id']
        timeout = self._collector_request_timeout
        cb = self._callback_fn
        finished = False
        paced = not collector_task.get('eval_flag', False)
        try:
            while not self._closing:
                if paced:
                    # Hold the collector back while it is too far ahead of the learner (its own queue then
                    # fills and it stops stepping its envs); the heartbeats keep the link alive meanwhile.
                    while not cb['wait_collect_budget']() and not self._closing and worker.conn is conn:
                        pass
                    if self._closing:
                        break
                outcome, result = self._links.request(
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
                    self._links.close_on_worker(worker, conn, 'collector_close_task', task_id)
                    self._links.resource_manager.release('collector', worker.name)
                    finished = True
                    cb['deal_with_collector_finish_task'](task_id, finish_info)
                    cb['deal_with_worker_change']()
                    return
                data = result.get('data')
                if isinstance(data, dict):
                    data = [data]
                if data:
                    route = cb.get('collector_buffer')  # data-parallel learners with bins: the collector's bin
                    target = route(buffer_id, worker.name) if route is not None else buffer_id
                    cb['deal_with_collector_send_data'](task_id, target, data)
        finally:
            if not finished and self._closing:
                self._links.close_on_worker(worker, conn, 'collector_close_task', task_id, timeout=2.0)
            self._untrack(task_id)
