"""Running one learner task on a data-parallel group of learners (``multi_learner.mode='data_parallel'``): every
configured learner takes it as one rank of a torch.distributed process group (``dist`` in its start task);
the data goes to them in rounds (``LearnerGroup``); rank 0's learn infos are the task's progress.

The start tasks go out at the same time (each rank waits in its start for the others to join the group).
When no round follows (the task is done, the data ended, the run closes) every rank is closed with
``stop_at_iter``: its start iteration plus the batches every rank received, so every rank stops after the
same step. When one rank fails or is lost, the group is closed and the task fails once (the coordinator then
gives it to the group again, re-formed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ding.config.parallel_system import can_bind, find_free_port
from ding.utils.jsonable import to_jsonable

from .learn_task_payload import learn_task_payload
from .learner_group import LearnerGroup
from .worker_links import CLOSING, LOST, OK, WorkerLink, WorkerLinks

# Seconds a rank's close may take beyond training the batches it holds.
CLOSE_TIMEOUT = 30.0


def _worker_index(name: str) -> tuple[int, str]:
    digits = ''.join(ch for ch in reversed(name) if ch.isdigit())[::-1]
    return (int(digits) if digits and name.endswith(digits) else 0, name)


class GroupRun:
    """One hand-over of a learner task to the group: its ranks, their links, and how it ends."""

    def __init__(self, task: dict[str, Any], group: LearnerGroup, names: list[str]) -> None:
        self.task = task
        self.group = group
        self.names = names
        self.links: list[tuple[WorkerLink, Any]] = []
        self.start_iters = [0] * len(names)
        self.learn_infos = [0] * len(names)
        self.failure: str | None = None  # why the group failed (the first rank that did)
        self.failed_rank: int | None = None
        self.failed_lost = False
        self._lock = threading.Lock()
        self._exited = 0
        self._closed = 0
        self._all_exited = threading.Event()

    def fail(self, rank: int, reason: str, lost: bool) -> None:
        with self._lock:
            if self.failure is None:
                self.failure = f'rank {rank} ({self.names[rank]}): {reason}'
                self.failed_rank = rank
                self.failed_lost = lost
        self.group.finish(f'rank {rank} failed')

    def rank_exited(self, timeout: float) -> None:
        """A rank's data loop ended; wait (up to ``timeout``) until every rank's did: only then are the batches
        each rank received final."""
        with self._lock:
            self._exited += 1
            if self._exited == len(self.names):
                self._all_exited.set()
        self._all_exited.wait(timeout)

    def rank_closed(self) -> bool:
        """A rank was closed; True for the last one (which reports the task's end)."""
        with self._lock:
            self._closed += 1
            return self._closed == len(self.names)


class GroupTasks:
    """The comm coordinator's side of data-parallel learner tasks (``send`` instead of its one-learner path)."""

    def __init__(
        self,
        links: WorkerLinks,
        callbacks: dict[str, Callable],
        logger: Any,
        system_cfg: dict[str, Any],
        path: Callable[[WorkerLink, str], str],
        track: Callable[[str, Callable, tuple, str], None],
        request_timeout: float,
    ) -> None:
        self._links = links
        self._cb = callbacks
        self._logger = logger
        self._system_cfg = system_cfg
        self._path = path
        self._track = track
        self._request_timeout = float(request_timeout)
        self._handed_over = 0  # group hand-overs so far

    def _closing(self) -> bool:
        return self._links.closing

    def _init_method(self, rank0: WorkerLink) -> str:
        port = (self._system_cfg.get('coordinator') or {}).get('dist_port')
        if self._handed_over and can_bind(rank0.host):
            # A re-formed group (after a failure) meets on a fresh port: learner0's process may still hold the
            # old group's store on the first one, and a rank joining it would read the old group's addresses.
            port = find_free_port(rank0.host)
        self._handed_over += 1
        if not isinstance(port, int):
            raise ValueError(
                f'coordinator.dist_port must be resolved to a port for data-parallel learners, got {port!r}'
            )
        return f'tcp://{rank0.host}:{port}'

    # ---- start ---------------------------------------------------------------------------------------------
    def send(self, task: dict[str, Any], group: LearnerGroup, multi_cfg: dict[str, Any]) -> bool:
        """Start ``task`` on every learner as the ranks of ``group``; True once it left the caller's hands
        (started, or failed and reported), False when not every learner is idle now."""
        rm = self._links.resource_manager
        assigned: list[dict[str, Any]] = []
        for _ in range(group.world_size):
            one = rm.assign_learner(task)
            if one is None:
                for a in assigned:
                    rm.release('learner', a['learner_id'])
                return False
            assigned.append(one)
        names = sorted((a['learner_id'] for a in assigned), key=_worker_index)
        run = GroupRun(task, group, names)
        run.links = [self._links.worker('learner', n) for n in names]
        task.update({'learner_id': names[0], 'resource_info': assigned[0]['resource_info'], 'group': names})
        try:
            init_method = self._init_method(run.links[0][0])
        except ValueError as exc:
            self._end_start(run, str(exc), lost=False)
            return True
        answers: list[tuple[str, dict[str, Any]] | None] = [None] * len(names)
        timeout = max(self._request_timeout, float(multi_cfg.get('timeout', 60.0)) + 10.0)

        def start(rank: int) -> None:
            worker, conn = run.links[rank]
            info = {k: v for k, v in task.items() if k not in ('replay_buffer_cfg', 'resource_info', 'group')}
            info.update(
                learner_id=worker.name,
                instance_name=worker.name,
                path_policy=self._path(worker, 'path_policy'),
                path_data=self._path(worker, 'path_data'),
                dist=dict(
                    rank=rank,
                    world_size=len(names),
                    init_method=init_method,
                    backend=multi_cfg.get('backend', 'gloo'),
                    timeout=float(multi_cfg.get('timeout', 60.0)),
                ),
            )
            info.setdefault('resume', None)
            answers[rank] = self._links.request(
                worker, conn, {'name': 'learner_start_task', 'task_info': to_jsonable(info)}, timeout
            )

        threads = [threading.Thread(target=start, args=(r,), daemon=True) for r in range(len(names))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad = [(r, a) for r, a in enumerate(answers) if a is None or a[0] != OK]
        if bad:
            rank, answer = bad[0]
            outcome, result = answer if answer is not None else (LOST, {'message': 'no answer'})
            if outcome == CLOSING:
                self._close_all(run, stop_iter=None)
                self._release_all(run)
                return False
            self._end_start(run, f'learner_start_task: {result.get("message")}', lost=outcome == LOST, rank=rank)
            return True
        for rank, answer in enumerate(answers):
            if answer is not None:
                start_iter = answer[1].get('start_iter', 0)
                run.start_iters[rank] = int(start_iter) if isinstance(start_iter, int) else 0
        self._logger.info(
            f'[CommCoordinator] learner task {task["task_id"]} started on {len(names)} ranks ({", ".join(names)}), '
            f'process group at {init_method}'
        )
        started = self._cb.get('deal_with_learner_started')
        if started is not None and answers[0] is not None:
            started(task, answers[0][1])
        for rank, name in enumerate(names):
            self._track(f'{task["task_id"]}#{rank}', self._run_rank, (run, rank), f'learner_task_{name}')
        return True

    def _end_start(self, run: GroupRun, reason: str, lost: bool, rank: int = 0) -> None:
        """A start failed: close the ranks that started, free every learner, report the task failed once."""
        self._logger.error(f'[CommCoordinator] learner task {run.task["task_id"]}: group start failed: {reason}')
        if lost:
            self._links.lose_worker('learner', run.names[rank], reason, run.links[rank][1])
        self._close_all(run, stop_iter=None)
        self._release_all(run)
        self._cb['deal_with_worker_change']()
        self._cb['deal_with_learner_fail_task'](run.task, reason)

    def _close_all(self, run: GroupRun, stop_iter: int | None) -> None:
        threads = [
            threading.Thread(target=self._close_rank, args=(run, r, stop_iter), daemon=True)
            for r in range(len(run.names))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _close_rank(self, run: GroupRun, rank: int, stop_iter: int | None) -> dict[str, Any]:
        worker, conn = run.links[rank]
        extra = None if stop_iter is None else {'stop_at_iter': run.start_iters[rank] + stop_iter}
        timeout = CLOSE_TIMEOUT if stop_iter is not None else 5.0
        return self._links.close_on_worker(worker, conn, 'learner_close_task', run.task['task_id'], timeout, extra)

    def _release_all(self, run: GroupRun) -> None:
        for name in run.names:
            self._links.resource_manager.release('learner', name)

    # ---- rounds ------------------------------------------------------------------------------------------------
    def _run_rank(self, run: GroupRun, rank: int) -> None:
        worker, conn = run.links[rank]
        task_id, buffer_id = run.task['task_id'], run.task['buffer_id']
        group = run.group

        def alive() -> bool:
            return not self._closing() and worker.conn is conn and run.failure is None

        while alive() and not group.finished:
            outcome, demand = self._links.request(
                worker,
                conn,
                {'name': 'learner_get_data_task', 'task_info': {'task_id': task_id}},
                self._request_timeout,
            )
            if outcome == CLOSING:
                break
            if outcome != OK:
                run.fail(rank, f'learner_get_data_task: {demand.get("message")}', outcome == LOST)
                break
            batches = group.serve(rank, demand, alive)
            if batches is None:
                break
            payload = learn_task_payload(demand, batches)
            # Counted as sent: a learn task the coordinator stops waiting for (it closes) still reaches the rank.
            group.accepted(rank, len(batches))
            outcome, result = self._links.request(
                worker,
                conn,
                {'name': 'learner_learn_task', 'task_info': {'task_id': task_id}, 'data': payload},
                self._request_timeout,
            )
            if outcome == CLOSING:
                break
            if outcome != OK:
                run.fail(rank, f'learner_learn_task: {result.get("message")}', outcome == LOST)
                break
            infos = result.get('infos')
            if not isinstance(infos, list):
                infos = [result.get('info', result)]
            run.learn_infos[rank] += len(infos)
            if rank == 0:  # every rank steps together: rank 0's infos are the task's progress
                done = False
                for info in infos:
                    if self._cb['deal_with_learner_judge_finish'](task_id, info):
                        done = True
                    self._cb['deal_with_learner_send_info'](task_id, buffer_id, info)
                if done:
                    group.finish('the learner task is done')
        run.rank_exited(timeout=2.0 if self._closing() else CLOSE_TIMEOUT)
        self._end_rank(run, rank)

    def _end_rank(self, run: GroupRun, rank: int) -> None:
        task_id = run.task['task_id']
        failed = run.failure is not None
        if failed and run.failed_lost and rank == run.failed_rank:
            self._links.lose_worker('learner', run.names[rank], run.failure or 'lost', run.links[rank][1])
        # Every rank stops after the batches all of them received (none waits in a collective for another).
        closed = self._close_rank(run, rank, None if failed else run.group.stop_iterations())
        run.group.rank_ended(rank, closed.get('last_iter'))
        if not failed:
            self._links.resource_manager.release('learner', run.names[rank])
        if not run.rank_closed():
            return
        if failed:
            self._release_all(run)
            self._cb['deal_with_worker_change']()
            self._cb['deal_with_learner_fail_task'](run.task, run.failure or 'a rank failed')
            return
        if self._closing():
            return
        closed = dict(closed)
        closed.setdefault('buffer_id', run.task['buffer_id'])
        closed['learn_infos_per_rank'] = list(run.learn_infos)
        self._logger.info(f'[CommCoordinator] learner task {task_id} finished on its group: {run.group.describe()}')
        self._cb['deal_with_learner_finish_task'](task_id, closed)
        self._cb['deal_with_worker_change']()


__all__ = ['GroupRun', 'GroupTasks']
