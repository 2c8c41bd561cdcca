"""``FlaskFileSystemLearner``: a comm learner served over HTTP (``ding.interaction``) that moves data and
weights through a shared directory (``ding.utils.file_transport``).

This module is the task-routing shell; the jobs live beside it: ``learn_task_exchange`` (the demand / result /
info queues and both sides of them), ``batch_loader`` (reading the sample files into batches),
``policy_publisher`` (the policy file), ``learner_run`` (one learner task's state), ``learner_thread`` (the
thread that trains it and cleans up after it), ``learner_start`` (the refusals of a start task, joining its
group), ``learner_slave``.

The coordinator drives it, one task at a time: ``learner_start_task`` builds the task's learner
(``BaseCommLearner._create_learner``) and starts it on its own thread; ``learner_get_data_task`` /
``learner_learn_task`` exchange demands, batches and learn infos through the length-one queues of
``LearnTaskExchange`` (its module doc has the protocol); ``learner_close_task`` stops the learner.
"""

from __future__ import annotations

import copy
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from easydict import EasyDict

from ding.interaction import TaskFail
from ding.utils.registry import COMM_LEARNER_REGISTRY
from ding.worker.comm_worker import SlaveHost

from .base_comm_learner import BaseCommLearner
from .batch_loader import BatchLoader
from .learn_task_exchange import POLL_S, LearnTaskExchange
from .learner_run import LearnerRun
from .learner_slave import LearnerSlave
from .learner_start import join_then_build, start_task_group, start_task_replay, start_task_settings
from .learner_thread import run_learner
from .policy_publisher import PolicyPublisher, cpu_snapshot, write_run_policy
from .task_setup import TaskSettings, check_comm_config
from .utils import LearnInfoGate, SendLearnInfoHook, SendPolicyHook


@COMM_LEARNER_REGISTRY.register('flask_fs')
class FlaskFileSystemLearner(BaseCommLearner):
    """Comm learner over HTTP (a :class:`LearnerSlave`) and a shared file system.

    Config (``system.learner.<name>`` of the parallel config): ``host``, ``port`` (0: a free one, see
    ``.port``), ``path_data`` / ``path_policy`` (defaults; a start task may name directories inside them),
    ``allowed_import_names`` (what a start task may have it import; see ``ding.worker.task_fields``), ``send_policy_freq``,
    ``send_policy_min_interval`` (seconds between two policy file writes, see ``PolicyPublisher``; the
    weights published are never older than that plus one write), ``use_distributed`` (must be False), the
    slave's ``heartbeat_span``, ``request_retries``, ``request_retry_waiting``, ``request_timeout``,
    ``channel``, and ``load_workers`` (threads reading the sample files of a batch concurrently),
    ``stop_timeout`` (seconds a close waits for the learner thread).
    The learner config (from the start task) may hold ``max_staleness``: samples whose policy is more than
    that many iterations older than the learner are dropped (counted as ``stale_dropped``), and
    ``comm_batches`` (default: this config's): batches asked for per data demand (``num_batches``); its learn
    task then carries that many batches and is answered with ``{'infos': [...]}``, one learn info per trained
    batch, so one HTTP round trip serves that many iterations.

    Use: ``comm = create_comm_learner(cfg); comm.start()`` (returns once serving); ``comm.close()``.
    """

    config = dict(
        type='flask_fs',
        import_names=['ding.worker.learner.comm.flask_fs_learner'],
        # Modules a start task may have this worker import (its policy's, env's, ...); the parallel worker
        # fills it from the run's local config. Any other import_names in a task is refused (task_fields).
        allowed_import_names=[],
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

    # Builds the batches from the sample files; a subclass may name its own (e.g. one that records them).
    batch_loader_cls: type[BatchLoader] = BatchLoader

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def __init__(self, cfg: dict[str, Any]) -> None:
        merged = self.default_config()
        merged.update(copy.deepcopy(dict(cfg)))
        super().__init__(merged)
        check_comm_config(self._cfg)
        self._send_policy_freq = int(self._cfg.send_policy_freq)
        self._run: LearnerRun | None = None
        self._lifecycle_lock = threading.RLock()  # start / close of learner tasks and of the comm learner
        self._host = SlaveHost(self._cfg, 'comm learner')
        self._pool: ThreadPoolExecutor | None = None
        self._publisher: PolicyPublisher | None = None
        self._exchange: LearnTaskExchange | None = None
        self._loader: BatchLoader | None = None
        self._logger: Any = None
        self._closed = False

    # ---- service -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the slave (returns once it listens); the learner itself starts with a start task. When the
        slave cannot start (e.g. the port is taken) everything acquired is released and the error raised."""
        cfg = self._cfg
        self._logger = self._host.open_log()
        self._pool = ThreadPoolExecutor(max_workers=cfg.load_workers, thread_name_prefix=f'ding-{cfg.name}-read')
        write = functools.partial(write_run_policy, logger=self._logger)
        self._publisher = PolicyPublisher(write, f'ding-{cfg.name}-publish', float(cfg.send_policy_min_interval))
        self._loader = self.batch_loader_cls(self._pool, self._logger)
        self._exchange = LearnTaskExchange(self._loader, self._logger, cfg.stop_timeout)
        callbacks: dict[str, Callable[..., Any]] = {
            'deal_with_resource': self.deal_with_resource,
            'deal_with_learner_start': self.deal_with_learner_start,
            'deal_with_get_data': self.deal_with_get_data,
            'deal_with_learner_learn': self.deal_with_learner_learn,
            'deal_with_learner_close': self.deal_with_learner_close,
            'deal_with_lost_master': self.deal_with_lost_master,
        }
        self._host.start(LearnerSlave, callbacks, release=self._release)
        super().start()

    def _release(self) -> None:
        """Free what ``start`` acquired besides the slave (a failed start, or the end of ``close``)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if self._publisher is not None:
            self._publisher.close(timeout=float(self._cfg.stop_timeout))
        self._pool = self._publisher = self._exchange = None

    def close(self) -> None:
        """Stop the running learner task, then the slave. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._lifecycle_lock:
            run = self._run
            if run is not None:
                self._stop_run(run, 'the comm learner was closed')
        self._host.close_slave()
        for observer in self.learner_observers:
            observer.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._release()
        super().close()
        self._host.close_log()

    @property
    def port(self) -> int:
        """The port the slave listens on (the chosen one after ``start()`` with port 0)."""
        return self._host.port

    @property
    def slave(self) -> LearnerSlave | None:
        slave = self._host.slave
        return slave if isinstance(slave, LearnerSlave) else None

    @property
    def logger(self) -> Any:
        return self._logger

    @property
    def batch_loader(self) -> BatchLoader | None:
        """What builds the batches (a ``batch_loader_cls``), None before ``start()``."""
        return self._loader

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

    # ---- transport (called by the learner, on its threads) ---------------------------------------------
    def get_data(self, batch_size: int) -> Any:
        """The learner's data source: one batch of the current task (see ``LearnTaskExchange.get_data``)."""
        exchange = self._exchange
        return exchange.get_data(batch_size) if exchange is not None else []

    def send_learn_info(self, learn_info: dict[str, Any]) -> None:
        """Complete one iteration's learn info and hand it to the learn tasks (``LearnTaskExchange``)."""
        if self._exchange is not None:
            self._exchange.send_learn_info(learn_info)

    def policy_publish_due(self) -> bool:
        """Whether ``send_policy`` would write the weights without waiting for ``send_policy_min_interval``;
        if not, ``SendPolicyHook`` skips building and snapshotting a state dict that would only be replaced
        (and the run's last weights are published when it ends)."""
        run = self._run
        if run is None or self._publisher is None or not run.publishes:
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
        if run is not None and self._publisher is not None and run.publishes:
            run.publish_skipped = False
            self._publisher.submit(run, cpu_snapshot(state_dict['model']), int(state_dict['iter']))

    # ---- coordinator side (slave task threads) -------------------------------------------------------
    def deal_with_resource(self) -> dict[str, int]:
        return {'cpu': os.cpu_count() or 1, 'gpu': torch.cuda.device_count() if torch.cuda.is_available() else 0}

    def _live_exchange(self) -> LearnTaskExchange:
        if self._exchange is None:
            raise TaskFail(message=f'comm learner {self._cfg.name} is not serving (start() it first)')
        return self._exchange

    def _active_run(self, what: str, task_info: dict[str, Any]) -> LearnerRun:
        run = self._run
        if run is None:
            raise TaskFail(message=f'{what}: no learner task is running; send learner_start_task first')
        task_id = task_info.get('task_id') if isinstance(task_info, dict) else None
        if task_id is not None and task_id != run.task_id:
            raise TaskFail(message=f"{what}: task_id '{task_id}' is not the running learner task '{run.task_id}'")
        if run.ending.is_set() or run.reason or run.storage_error:
            raise TaskFail(run.refusal(), message=run.ended_message(what))
        return run

    def deal_with_learner_start(self, task_info: dict[str, Any]) -> dict[str, Any]:
        """Build the learner of a start task and start training in a new thread."""
        if not isinstance(task_info, dict) or not isinstance(task_info.get('task_id'), str):
            raise TaskFail(message="learner_start_task: task_info must be a dict with a string 'task_id'")
        task_id = task_info['task_id']
        # before anything stops, imports or writes
        settings = start_task_settings(self._cfg, task_id, task_info, self._logger)
        group = start_task_group(task_id, task_info)
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
            self._live_exchange().drain()
            run = join_then_build(
                task_id, group, functools.partial(self._prepare_run, settings, task_info), self._logger
            )
            run.group = group
            self._run = self._live_exchange().run = run
            run.thread = threading.Thread(
                target=self._learner_loop, args=(run,), daemon=True, name=f'ding-{self._cfg.name}-learner'
            )
            run.thread.start()
            # Answer once the weights are published: collectors started after this find the policy file
            # (only rank 0 of a group publishes).
            while run.publishes and not run.published.wait(POLL_S):
                if run.finished.is_set():
                    raise TaskFail(message=run.ended_message(f'learner_start_task {task_id}'))
        self._logger.info(
            f'learner task {task_id} started at iteration {run.learner.train_iter}, '
            f'{run.learner.cfg.train_iterations} iterations to train'
        )
        address = next((o.weights_address for o in self.learner_observers if o.weights_address), None)
        return {
            'message': 'learner task has started',
            'task_id': task_id,
            'start_iter': run.learner.train_iter,
            'weights_address': address,
        }

    def _prepare_run(self, settings: TaskSettings, task_info: dict[str, Any]) -> LearnerRun:
        self._send_policy_freq = settings.send_policy_freq
        replay_cfg = start_task_replay(task_info)
        run = settings.new_run(task_info, self._create_learner(task_info), self._logger)
        if replay_cfg is not None:
            from ding.worker.replay_service.remote_buffer import RemoteReplayBuffer  # deferred: the replay extra

            batch_size = int(run.learner.policy.get_attribute('batch_size'))
            run.replay = RemoteReplayBuffer(replay_cfg, batch_size, self._cfg.secret, on_state=self._replay_state)
            self._logger.info(f'learner task {run.task_id}: batches from the replay service at {run.replay.address}')
        return run

    def _replay_state(self, before: str, after: str) -> None:
        self._logger.info(f'replay service: {before} -> {after}')

    def _learner_loop(self, run: LearnerRun) -> None:
        run_learner(
            run, self._live_exchange, self.send_policy, self._flush_policy, self._logger, self._cfg.stop_timeout
        )

    def _flush_policy(self, timeout: float) -> bool:
        """Whether the policy files submitted so far were written within ``timeout`` (True without a publisher)."""
        return self._publisher is None or self._publisher.flush(timeout=timeout)

    def _stop_run(self, run: LearnerRun, reason: str) -> None:
        """Stop the learner after its current iteration and wait for its thread (``stop_timeout``)."""
        timeout = float(self._cfg.stop_timeout)
        if not run.stop(reason, timeout):
            self._logger.error(f'learner task {run.task_id}: the learner thread did not stop within {timeout}s')

    def deal_with_get_data(self, task_info: dict[str, Any]) -> dict[str, Any]:
        """Answer a get-data task with the learner's data demand (waits until the learner asks)."""
        run = self._active_run('learner_get_data_task', task_info)
        return self._live_exchange().answer_get_data(run)

    def deal_with_learner_learn(self, task_info: dict[str, Any], data: Any) -> dict[str, Any]:
        """Hand the batch's metadata to the learner and answer with the learn info of the iteration it trained."""
        run = self._active_run('learner_learn_task', task_info)
        tune = task_info.get('tune')
        if tune:
            # From the coordinator's run control; the learner's RunControlHook applies it between iterations.
            for observer in self.learner_observers:
                try:
                    observer.tune(tune)
                except Exception as exc:  # a bad tune must not fail the learn task
                    self._logger.warning(f'learner task {run.task_id}: tune {tune} not applied: {exc}')
        return self._live_exchange().answer_learn(run, data)

    def deal_with_learner_close(self, task_info: dict[str, Any]) -> dict[str, Any]:
        """Stop the running learner task (the comm learner stays up for the next start task)."""
        run = self._run
        task_id = task_info.get('task_id') if isinstance(task_info, dict) else None
        if run is None:
            return {'message': 'learner task has closed', 'task_id': task_id, 'last_iter': 0}
        if task_id is not None and task_id != run.task_id:
            # Nothing of that task runs here (e.g. it was moved elsewhere): closed already.
            return {'message': 'learner task has closed', 'task_id': task_id, 'last_iter': 0}
        stop_iter = task_info.get('stop_at_iter') if isinstance(task_info, dict) else None
        with self._lifecycle_lock:
            if isinstance(stop_iter, int) and not isinstance(stop_iter, bool):
                # A rank of a data-parallel group: train the batches it holds, then stop where every rank stops.
                if not run.stop_at(stop_iter, 'closed by learner_close_task', float(self._cfg.stop_timeout)):
                    self._logger.error(f'learner task {run.task_id}: the learner thread did not stop in time')
            else:
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
