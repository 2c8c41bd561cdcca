"""``BaseParallelCollector``: one collect or evaluation task of a parallel-mode collector process.

A comm collector (``ding.worker.collector.comm``) builds one parallel collector per collector task, binds
its transport to it (``send_stepdata``, ``send_metadata``, ``get_policy_update_info``) and calls ``start()``:
the task then runs on its own thread until its budget is spent or ``close()`` is called. The base class
owns what every parallel collector shares: the thread and its stop flag, loading newer policy weights
every ``update_policy_second`` (keeping the last good ones when a file is missing or bad), turning a chunk
of training samples into one data file plus one metadata dict per sample, and the finish info.

Chunks are written on a second thread (:class:`ChunkWriter`) while the envs keep stepping: writing a file
mostly waits on the disk (fsync), about 20 ms per file here against 3 ms of CPU.

The env manager is wrapped in an :class:`EnvStepObserver`, which counts env steps and episode returns as
they happen and raises :class:`CollectorStopped` on the next step once the task is closed, so a close
does not wait for a collect call or an evaluation to complete.
"""

from __future__ import annotations

import copy
import threading
import time
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from easydict import EasyDict

from ding.utils.log_helper import build_logger, close_logger

from .policy_updater import PolicyUpdater, check_weights_refresh
from .task_threads import ChunkWriter, CollectorStopped, EnvStepObserver
from .weights_client import check_policy_transport, state_dict_mismatch


def _not_attached(name: str) -> Any:

    def fn(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f'parallel collector: {name} is not bound; a comm collector binds it (BaseCommCollector._create_collector)'
        )

    return fn


class BaseParallelCollector(ABC):
    """Base of the parallel collectors (see the module docstring).

    ``cfg`` (EasyDict) holds the collector config (``policy.collect.collector``) plus what the collector
    start task carries: ``env``, ``policy``, ``eval_flag``, ``policy_kwargs``, ``path_policy`` (the policy
    *file*), ``path_data``, ``task_id``, ``exp_name``, ``instance_name``, ``seed``. ``logger`` is the text
    logger to write to (the comm collector's); one is built under ``./{exp_name}/log/{instance_name}``
    when None.

    Subclasses set ``self._policy`` (a policy mode view with ``state_dict`` / ``load_state_dict``) and
    ``self._env`` (an :class:`EnvStepObserver`) and implement ``_run`` (the blocking work of the task)
    and ``_close_resources``.
    """

    config: dict[str, Any] = dict(
        # seconds between two looks at the policy file for newer weights
        update_policy_second=3.0,
        # 'fs': weights from the policy file in path_policy; 'http': from the learner's GET /weights/current
        # at weights_address (sha256-verified, last good weights kept on any failure)
        policy_transport='fs',
        weights_address=None,
        # with 'http': 'poll' /weights/current every update_policy_second, or 'subscribe' to the learner's
        # /weights/stream and fetch when it announces a version (needs the run secret, as parallel workers have)
        weights_refresh='poll',
    )

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def __init__(self, cfg: dict[str, Any], logger: Any | None = None) -> None:
        merged = self.default_config()
        merged.update(copy.deepcopy(dict(cfg)))
        self._cfg = merged
        self._eval_flag = bool(merged.get('eval_flag', False))
        self._task_id = str(merged.get('task_id') or 'collector_task')
        self._instance_name = str(merged.get('instance_name') or 'collector0')
        self._exp_name = str(merged.get('exp_name') or 'default_experiment')
        self._path_policy = merged.get('path_policy') or None
        update_policy_second = float(merged.update_policy_second)
        if not update_policy_second >= 0:
            raise ValueError(
                f'parallel collector {self._instance_name}: update_policy_second must be >= 0, '
                f'got {merged.update_policy_second!r}'
            )
        policy_transport = check_policy_transport(
            merged.get('policy_transport') or 'fs', f'parallel collector {self._instance_name}: policy_transport'
        )
        self._prefix = (
            f'[{"EVALUATOR" if self._eval_flag else "COLLECTOR"} {self._instance_name}] task {self._task_id}:'
        )
        if logger is None:
            logger, _ = build_logger(
                f'./{self._exp_name}/log/{self._instance_name}', f'{self._instance_name}_parallel', need_tb=False
            )
            self._own_logger = True
        else:
            self._own_logger = False
        self._logger = logger
        self._weights = PolicyUpdater(
            policy_transport,
            update_policy_second,
            self._path_policy,
            merged.get('weights_address') or None,
            logger,
            self._prefix,
            refresh=check_weights_refresh(
                merged.get('weights_refresh') or 'poll', f'parallel collector {self._instance_name}: weights_refresh'
            ),
        )

        # The transport; bound by the comm collector.
        self.send_metadata = _not_attached('send_metadata')
        self.send_stepdata = _not_attached('send_stepdata')
        self.get_policy_update_info = _not_attached('get_policy_update_info')

        self._policy: Any = None
        self._env: EnvStepObserver | None = None
        self._stop_event = threading.Event()
        self._finished = threading.Event()
        self._thread: threading.Thread | None = None
        self._resources_closed = False
        self._error: str | None = None
        self._policy_iter = 0
        self._policy_loads = 0
        self._writer: ChunkWriter | None = None
        self._produced_count = 0  # samples handed to the writer
        self._sample_count = 0  # samples whose metadata reached the comm collector
        self._chunk_count = 0
        self._start_time: float | None = None
        self._end_time: float | None = None

    def use_run_secret(self, secret: str | None) -> None:
        """The run secret (the comm collector's): weights over HTTP are then signature-checked, and the
        learner's weights stream can be followed (``weights_refresh='subscribe'``)."""
        self._weights.use_run_secret(secret)

    # ---- properties --------------------------------------------------------------------------------------
    @property
    def task_id(self) -> str:
        return self._task_id

    @property
    def eval_flag(self) -> bool:
        return self._eval_flag

    @property
    def policy(self) -> Any:
        """The policy mode view the task acts with (``collect_mode`` or ``eval_mode``)."""
        return self._policy

    @property
    def env_manager(self) -> Any:
        """The env manager (unwrapped), None before it is built."""
        return self._env.env if self._env is not None else None

    @property
    def policy_iter(self) -> int:
        """Version (learner iteration) of the weights the policy acts with now; 0 before any load."""
        return self._policy_iter

    @property
    def finished(self) -> bool:
        """True once the task's thread has ended (budget spent, closed, or failed) and its envs are closed."""
        return self._finished.is_set()

    @property
    def stopped(self) -> bool:
        """True once ``close()`` was called."""
        return self._stop_event.is_set()

    @property
    def error(self) -> str | None:
        """Why the task failed (``'<ExceptionType>: message'``), None if it did not."""
        return self._error

    @property
    def sample_count(self) -> int:
        """Training samples handed to the comm collector so far."""
        return self._sample_count

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Run the task on a new thread (returns at once)."""
        if self._thread is not None:
            raise RuntimeError(f'{self._prefix} start() was already called')
        self._thread = threading.Thread(
            target=self._thread_main,
            daemon=True,
            name=f'ding-{self._instance_name}-{"eval" if self._eval_flag else "collect"}',
        )
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the task's thread; True once it has ended."""
        if self._thread is None:
            return self._finished.is_set()
        return self._finished.wait(timeout)

    def close(self, timeout: float | None = 30.0) -> bool:
        """Stop the task (the running env step finishes first) and release its envs; True once it has ended.

        Safe to call more than once and from any thread but the task's own.
        """
        self._stop_event.set()
        if self._thread is None:
            self._release()
            self._finished.set()
            return True
        return self.join(timeout)

    def _thread_main(self) -> None:
        self._start_time = time.time()
        try:
            self._writer = ChunkWriter(self._write_chunk, self._stop_event, name=f'ding-{self._instance_name}-write')
            self._run()
            self._writer.finish()  # every chunk is with the comm collector before the task counts as finished
        except CollectorStopped:
            pass
        except BaseException as exc:  # noqa: B902 -- reported to the coordinator through the next data task
            if not self._stop_event.is_set():
                self._error = f'{type(exc).__name__}: {exc}'
                self._logger.exception(f'{self._prefix} failed')
        finally:
            if self._writer is not None and not self._writer.close(timeout=30.0):
                self._logger.error(f'{self._prefix} the sample writer did not stop within 30s')
            self._end_time = time.time()
            self._release()
            self._finished.set()

    def _release(self) -> None:
        if self._resources_closed:
            return
        self._resources_closed = True
        self._weights.close()
        try:
            self._close_resources()
        except Exception as exc:  # the task is over anyway; say why the close was not clean
            self._logger.error(f'{self._prefix} error while closing its envs: {exc!r}')
        if self._own_logger:
            close_logger(self._logger)

    @abstractmethod
    def _run(self) -> None:
        """The task's work, on the task thread; returns when its budget is spent or it was stopped."""

    @abstractmethod
    def _close_resources(self) -> None:
        """Close the env manager (and anything else the task opened)."""

    # ---- policy weights ------------------------------------------------------------------------------------
    def _update_policy(self, force: bool = False) -> bool:
        """Load newer weights (see :class:`PolicyUpdater`) at most every ``update_policy_second``; True if
        loaded. On any failure the policy keeps acting with its last good weights."""
        version = self._weights.update(self._policy, self._policy_iter, self.get_policy_update_info, force)
        if version is None:
            return False
        self._policy_iter = version
        self._policy_loads += 1
        return True

    # ---- samples out ---------------------------------------------------------------------------------------
    def _send_samples(self, samples: list[dict[str, Any]], unroll_len: int) -> None:
        """Hand one chunk of training samples to the writer thread (see :meth:`_write_chunk`).

        ``policy_iter`` of a sample is the version that chose its action: the ``collect_iter`` the serial
        collector stamped on it (a trajectory may span a weights update), else the current version.
        """
        if not samples:
            return
        current = self._policy_iter
        versions = [int(s.get('collect_iter', current)) for s in samples]
        env_ids = [int(s.get('env_id', -1)) for s in samples]
        self._produced_count += len(samples)
        chunk = (samples, versions, env_ids, unroll_len)
        if self._writer is None:  # not on the task thread (e.g. a subclass test): write in place
            self._write_chunk(chunk)
        else:
            self._writer.put(chunk)

    def _write_chunk(self, chunk: Any) -> None:
        """Writer thread: one data file for the chunk, then one metadata dict per sample to the comm collector."""
        samples, versions, env_ids, unroll_len = chunk
        data_ids = self.send_stepdata(samples)
        task_id = self._task_id
        metadata = [
            {
                'data_id': data_id,
                'policy_iter': version,
                'env_id': env_id,
                'unroll_len': unroll_len,
                'collect_iter': version,
                'task_id': task_id,
                'priority': 1.0,
            }
            for data_id, version, env_id in zip(data_ids, versions, env_ids)
        ]
        self.send_metadata(metadata)
        self._sample_count += len(metadata)
        self._chunk_count += 1

    # ---- finish info ---------------------------------------------------------------------------------------
    def get_finish_info(self) -> dict[str, Any]:
        """What the task did (JSON-ready): the protocol's finish info plus throughput figures.

        ``step_count`` is env steps (abnormal ones excluded); ``reward_*`` summarise the episodes that ended
        during the task (None when none did).
        """
        env = self._env
        returns = list(env.episode_returns) if env is not None else []
        steps = env.step_count if env is not None else 0
        episodes = env.episode_count if env is not None else 0
        start = self._start_time or time.time()
        end = self._end_time or time.time()
        duration = max(end - start, 1e-9)
        if returns:
            arr = np.asarray(returns, dtype=np.float64)
            rewards: dict[str, float | None] = {
                'reward_mean': float(arr.mean()),
                'reward_std': float(arr.std()),
                'reward_max': float(arr.max()),
                'reward_min': float(arr.min()),
            }
        else:
            rewards = {'reward_mean': None, 'reward_std': None, 'reward_max': None, 'reward_min': None}
        info = {
            'task_id': self._task_id,
            'eval_flag': self._eval_flag,
            'collector_done': True,
            'episode_count': episodes,
            'step_count': steps,
            'sample_count': self._sample_count,
            **rewards,
            'policy_iter': self._policy_iter,
            'policy_loads': self._policy_loads,
            'duration': duration,
            'avg_envstep_per_sec': steps / duration,
            'avg_sample_per_sec': self._sample_count / duration,
            'stopped': self._stop_event.is_set(),
        }
        if self._error is not None:
            info['error'] = self._error
        return info


# ChunkWriter, CollectorStopped, EnvStepObserver and state_dict_mismatch are importable from here, as before.
__all__ = ['BaseParallelCollector', 'ChunkWriter', 'CollectorStopped', 'EnvStepObserver', 'state_dict_mismatch']
