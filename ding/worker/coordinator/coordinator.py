"""The coordinator of the parallel pipeline: turns the commander's decisions into running tasks and moves
sample metadata from collectors to the learner through one replay buffer per learner task."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.utils.log_helper import build_logger, close_logger
from ding.utils.registry import COORDINATOR_REGISTRY

from .base_parallel_commander import create_parallel_commander
from .comm_coordinator import CommCoordinator
from .coordinator_config import COORDINATOR_DEFAULTS
from .data_plane import DataPlane
from .learner_group import GroupData, LearnerGroups
from .run_state import STATE_FILE, LearnProgress, RunStateFile
from .scheduler import TaskScheduler
from .service_control import CoordinatorControl
from .task_callbacks import TASK_CALLBACKS, TaskCallbacks

__all__ = ['STATE_FILE', 'TASK_CALLBACKS', 'Coordinator']


@COORDINATOR_REGISTRY.register('coordinator')
class Coordinator(TaskCallbacks):
    """Runs the parallel training: learner tasks, collector tasks, their data, and the end of the run.

    The work is split by job: :class:`TaskScheduler` produces tasks with the commander and hands them to idle
    workers through the :class:`CommCoordinator` (which calls back the ``deal_with_*`` methods, in
    :class:`TaskCallbacks`, as tasks progress); :class:`DataPlane` holds the replay buffers, the sample files
    and the pacing of collectors; :class:`RunStateFile` keeps the counters a resumed run continues from;
    :class:`CoordinatorControl` is what a run service may change (tunes, pause, terminate).

    ``system_shutdown_flag`` turns True when the commander ends the run (e.g. the stop value was reached)
    or a limit (``max_env_step`` / ``max_train_iter``) is hit; the owner then calls ``close()``.
    """

    config = COORDINATOR_DEFAULTS  # every setting with its meaning: coordinator_config.py
    _scheduler: TaskScheduler

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
        secret: str | None = None,
    ) -> None:
        """``cfg``: the compiled parallel config (``main`` and ``system`` sections). The run also ends after
        ``max_env_step`` env steps or ``max_train_iter`` learner iterations when given. ``resume``: the
        checkpoint the first learner task starts from (``ding.worker.resume.resolve_resume``); ``run_started``:
        when the run began (a restarted learner resumes only from checkpoints written since, or since the
        resumed one). ``secret``: the run secret proven to the workers on connect (``ding.interaction.base.auth``)."""
        self._cfg = EasyDict(cfg)
        coor_cfg = EasyDict(copy.deepcopy(dict(self.default_config())))
        coor_cfg.update(self._cfg.system.coordinator)
        self._coor_cfg = coor_cfg
        self._exp_name = self._cfg.main.exp_name
        self._log_every_iter = max(1, int(coor_cfg.log_every_iter))
        self.max_env_step = max_env_step
        self.max_train_iter = max_train_iter
        self._logger, _ = build_logger(
            f'./{self._exp_name}/log/coordinator', 'coordinator', need_tb=False, to_console=log_to_console
        )
        self._commander = create_parallel_commander(self._cfg.main)
        self._commander_lock = threading.RLock()
        self._data = DataPlane(
            coor_cfg, self._cfg.system.path_data, self._exp_name, lambda: self.train_iter, self.info, self.error
        )
        self._control = CoordinatorControl(
            self._cfg.main,
            self._cfg.system,
            self._data,
            self._commander,
            self._commander_lock,
            progress=lambda: (self.train_iter, self.env_step),
            info=self.info,
            on_pause_change=lambda: self._scheduler.notify_change(),
            terminate=self._terminate,
            resume=resume,
            run_started=float(run_started) if run_started is not None else time.time(),
        )
        self._groups = LearnerGroups(
            len(self._cfg.system.coordinator.get('learner') or {}),
            GroupData(self._data.sample, self._data.buffer_size, self._data.wait_for_data, self._collection_over),
            self._data.ensure_buffer,
            self.info,
        )
        callbacks: dict[str, Callable] = {name: getattr(self, name) for name in TASK_CALLBACKS}
        callbacks.update(
            learner_group=self._groups.for_task,
            collector_buffer=self._groups.route,
            deal_with_worker_change=lambda: self._scheduler.notify_change(),
            deal_with_learner_started=lambda task, answer: self._scheduler.learner_started(task, answer),
            wait_for_data=self._data.wait_for_data,
            wait_collect_budget=self._data.wait_collect_budget,
            deal_with_worker_squatted=self._worker_squatted,
        )
        self._squatted: list[tuple[str, str]] = []
        self._squatted_lock = threading.Lock()
        self._interaction = CommCoordinator(
            coor_cfg, callbacks, self._logger, system_cfg=self._cfg.system, secret=secret
        )
        collector_cfg = self._cfg.main.policy.collect.collector
        self._scheduler = TaskScheduler(
            coor_cfg,
            self._commander,
            self._commander_lock,
            self._data,
            self._control,
            {'learner': self._interaction.send_learner_task, 'collector': self._interaction.send_collector_task},
            train_iter=lambda: self.train_iter,
            end_run=self._shutdown,
            info=self.info,
            error=self.error,
            http_weights=collector_cfg.get('policy_transport') == 'http' and not collector_cfg.get('weights_address'),
        )
        self._progress = LearnProgress()
        self._state_file = RunStateFile(
            self._exp_name, self._commander, self._commander_lock, self._progress, self._data, self.info, self.error
        )
        self._closed = False
        self._system_shutdown_flag = False
        self._shutdown_reason = ''
        self._solved = False
        self.start_time: float | None = None
        if resume:
            self.restore_state()

    def start(self) -> None:
        """Start the master, connect to the workers and begin producing / assigning tasks."""
        self.start_time = time.time()
        self._interaction.start()
        self._data.start()
        self._scheduler.start()
        self.info('coordinator started')

    def close(self) -> None:
        """Stop producing tasks, close the running ones on the workers, close the buffers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        # Requests in flight (e.g. a start task an assign thread waits for) give up now.
        self._interaction.stop_requests()
        self._scheduler.stop()
        self._data.stop()
        self._scheduler.join(timeout=5)
        self._interaction.close()
        self._data.close(keep_data=bool(self._coor_cfg.keep_data))
        with self._commander_lock:
            self._commander.close()
        group = self._groups.describe()
        if group is not None:  # data-parallel learners: rounds, samples two ranks trained, samples left
            self.info(f'learner group: {group}')
        self.info(f'coordinator closed ({self._shutdown_reason or "no stop reason"})')
        close_logger(self._logger)

    def __del__(self) -> None:
        # Only the cheap part: a coordinator that was never closed must not keep its threads spinning.
        if '_scheduler' in self.__dict__:  # (its constructor may have failed before building it)
            self._scheduler.stop()

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
    def config_refusal(self) -> str | None:
        """Why a worker refused a task for its config (the run then ended; it cannot succeed), else None."""
        return self._scheduler.config_refusal

    @property
    def storage_refusal(self) -> str | None:
        """Why the run ended because a worker could not write a file (the path and what was not saved), else None."""
        return self._scheduler.storage_refusal

    @property
    def commander(self) -> Any:
        return self._commander

    @property
    def interaction(self) -> CommCoordinator:
        return self._interaction

    @property
    def data_plane(self) -> DataPlane:
        return self._data

    @property
    def run_control(self) -> CoordinatorControl:
        return self._control

    @property
    def env_step(self) -> int:
        return int(getattr(self._commander, 'total_collector_env_step', 0))

    @property
    def best_eval_return(self) -> float:
        return float(getattr(self._commander, 'best_eval_return', float('-inf')))

    @property
    def train_iter(self) -> int:
        """The learner's iteration as its learn infos report it."""
        return self._progress.train_iter

    @train_iter.setter
    def train_iter(self, value: int) -> None:
        self._progress.train_iter = int(value)

    @property
    def pushed_samples(self) -> int:
        return self._data.pushed_samples

    @property
    def failed_tasks(self) -> list[dict[str, Any]]:
        return self._scheduler.failed_task_records()

    def replay_buffer(self, buffer_id: str) -> Any | None:
        return self._data.buffer(buffer_id)

    def collect_data_garbage(self, min_age: float) -> int:
        """Delete sample files no replay buffer refers to and older than ``min_age`` s; return how many."""
        return self._data.collect_data_garbage(min_age)

    def state_dict(self) -> dict:
        """The run's counters (env steps, learner iteration, samples pushed) that a resumed run continues."""
        return self._state_file.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self._state_file.load_state_dict(state_dict)

    @property
    def state_path(self) -> str:
        """``./{exp_name}/coordinator_state.json``: the counters, rewritten (atomically) as the run goes."""
        return self._state_file.path

    def save_state(self, min_interval: float = 0.0) -> str | None:
        """Write the counters unless the last write is less than ``min_interval`` s old; the path if written."""
        return self._state_file.save(min_interval)

    def restore_state(self) -> dict | None:
        """At the start of a resumed run: load ``state_path`` if there is one (None otherwise)."""
        return self._state_file.restore()

    def notify_worker_dead(self, kind: str, name: str) -> None:
        """The pipeline saw worker ``name`` exit: fail its task now instead of waiting for heartbeats."""
        self.info(f'{kind} {name} reported dead by the pipeline')
        self._interaction.notify_worker_dead(kind, name)

    def _worker_squatted(self, kind: str, name: str, reason: str) -> None:
        with self._squatted_lock:
            self._squatted.append((kind, name))

    def take_squatted_workers(self) -> list[tuple[str, str]]:
        """``(kind, name)`` of the workers found held by someone else since the last call (the pipeline
        replaces the ones it launched on a new port)."""
        with self._squatted_lock:
            taken, self._squatted = self._squatted, []
        return taken

    def update_worker_address(self, kind: str, name: str, host: str, port: int) -> None:
        """A restarted worker listens elsewhere: connect there from now on."""
        self._interaction.update_worker_address(kind, name, host, port)

    def _shutdown(self, reason: str, solved: bool = False) -> None:
        if not self._system_shutdown_flag:
            self._shutdown_reason = reason
            self._solved = solved
            self._system_shutdown_flag = True
            self.info(f'the run ends: {reason}')
        self._scheduler.stop()
        self._data.stop()

    def _terminate(self, reason: str) -> None:  # run control's terminate: end the run now
        self._shutdown(reason)
        self.close()

    def _check_limits(self) -> None:
        if self.max_train_iter is not None and self.train_iter >= self.max_train_iter:
            self._shutdown('max_train_iter reached')
        elif self.max_env_step is not None and self.env_step >= self.max_env_step:
            self._shutdown('max_env_step reached')

    def _end_for_commander(self) -> None:
        self._shutdown(
            getattr(self._commander, 'end_reason', '') or 'the commander ended the run',
            solved=bool(getattr(self._commander, 'solved', False)),
        )

    def _collection_over(self) -> bool:
        """No more collector tasks will come (every sample of the run has been pushed)."""
        with self._commander_lock:
            return bool(self._commander.end_flag)

    # ---- run service -----------------------------------------------------------------------------
    def attach_service(self, runtime: Any) -> None:
        """Make this run controllable through ``runtime`` (``start_service(..., instance='coordinator')``):
        tunables, pause, terminate (see :class:`CoordinatorControl`). The owner calls ``poll_service()``."""
        self._control.attach(runtime)

    def poll_service(self) -> str:
        """Between rounds (the pipeline's supervise loop): apply tunes, pause / resume the task flow, honour
        terminate. Returns the run control's state."""
        return self._control.poll()

    def learner_task_extra(self, task_id: str) -> dict[str, Any] | None:
        """Fields for the next learn task's task_info: tunes for the learner (sent once)."""
        return self._control.learner_task_extra()

    # ---- logging ---------------------------------------------------------------------------------
    def info(self, s: str) -> None:
        self._logger.info(f'[Coordinator] {s}')

    def error(self, s: str) -> None:
        self._logger.error(f'[Coordinator] {s}')

    def summary(self) -> dict[str, Any]:
        """Figures of the run so far."""
        return {
            'solved': self._solved,
            'reason': self._shutdown_reason,
            'env_step': self.env_step,
            **self._progress.snapshot(),  # train_iter, learn_info_count, policy_lag, stale_dropped
            'pushed_samples': self.pushed_samples,
            'sampled_batches': self._data.sampled_batches,
            'best_eval_return': self.best_eval_return,
            'buffer_stale_removed': self._data.stale_removed(),
            'failed_tasks': self.failed_tasks,
            'multi_learner': self._groups.stats(),  # data-parallel learners: rounds, duplicates, samples left
            'wall_time': (time.time() - self.start_time) if self.start_time else 0.0,
        }
