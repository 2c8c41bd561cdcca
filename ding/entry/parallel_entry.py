"""The parallel pipeline: a coordinator in this process, each learner and collector in its own process.

``parallel_pipeline(cfg_file, seed)`` compiles the config, starts every worker process
(``python -m ding.entry.parallel_worker``), waits until each one serves, runs the coordinator until the
commander ends the run (stop value reached) or a limit is hit, restarts worker processes that die on
the way, and on every exit path (end of run, error, Ctrl-C, SIGTERM) stops all of them: SIGTERM, a
grace period, then SIGKILL. Each worker's output goes to ``./{exp_name}/log/{name}.log``. Waiting for the
workers and restarting them: ``ding.entry.parallel_supervise``.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from easydict import EasyDict

from ding.config.errors import ConfigError
from ding.config.loader import read_config
from ding.interaction.base.auth import RUN_SECRET_ENV, new_run_secret, resolve_run_secret
from ding.utils.atomic_file import StorageError
from ding.utils.console import console_level_problem, set_console_level
from ding.utils.stop_request import StopRequest, signals_request_stop
from ding.utils.tls import TlsSettings
from ding.worker.coordinator.coordinator import Coordinator
from ding.worker.replay_service import check_parallel_replay

from .parallel_prepare import prepare_run
from .parallel_processes import WarmWorkers, WorkerProcess, expected_local_workers, is_local_host, stop_workers
from .parallel_supervise import (
    MAX_RESTARTS,
    READY_TIMEOUT,
    STATE_SAVE_INTERVAL,
    STOP_WAIT,
    record_evaluations,
    supervise,
    wait_ready,
    write_config_json,
)
from .progress import RunProgress


@dataclass
class ParallelResult:
    """What a parallel run achieved (also printed as the one-line summary)."""

    exp_name: str
    solved: bool
    reason: str
    env_step: int
    train_iter: int
    wall_time: float
    best_eval_return: float
    restarts: dict[str, int] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def _load(input_cfg: Any) -> tuple[EasyDict, EasyDict, EasyDict | None]:
    if isinstance(input_cfg, (str, os.PathLike)):
        return read_config(os.fspath(input_cfg))
    if isinstance(input_cfg, (tuple, list)) and len(input_cfg) in (2, 3):
        parts = [EasyDict(copy.deepcopy(dict(p))) if p is not None else None for p in input_cfg]
        return parts[0], parts[1], (parts[2] if len(parts) == 3 else None)
    raise ConfigError(
        f'parallel_pipeline: input_cfg must be a config file path or a (main, create, system) '
        f'tuple, got {type(input_cfg).__name__}'
    )


def parallel_pipeline(
    input_cfg: str | tuple[dict, dict, dict],
    seed: int = 0,
    enable_total_log: bool | None = False,
    disable_flask_log: bool | None = True,
    exp_name: str | None = None,
    max_env_step: int | None = None,
    max_train_iter: int | None = None,
    ready_timeout: float = READY_TIMEOUT,
    stop_event: threading.Event | None = None,
    resume: str | None = None,
) -> ParallelResult:
    """Train with separate learner and collector processes until ``env.stop_value`` (or a limit) is reached.

    ``input_cfg``: a config file defining ``main_config``, ``create_config`` and ``system_config``, or that
    tuple. ``exp_name`` overrides ``main_config.exp_name``. ``enable_total_log`` also echoes the coordinator's
    log to the console; ``disable_flask_log`` silences the per-request HTTP log of the workers.
    Returns a :class:`ParallelResult`; prints ``[ding] EXP: SOLVED | ...`` on stderr. Ctrl-C / SIGTERM stop
    every process and raise KeyboardInterrupt. A task a worker refused for its config ends the run with a
    ``ConfigError`` naming the reason; a checkpoint, policy or sample file a worker could not write ends it
    with a ``StorageError`` naming the path and what was not saved. Setting ``stop_event`` (from another
    thread) ends the run the same orderly way and returns (reason 'stopped').

    ``resume`` ('auto', 'never' or a checkpoint path; default: the config's top-level ``resume``, else
    'never'): the learner starts from that checkpoint (``auto``: the newest valid one of
    ``./{exp_name}/ckpt_learner0``). The config's ``service`` section gives the coordinator (and the
    learner) the run service: ``/run/*`` (pause, resume, tune, terminate), ``/metrics``, ``/healthz``.
    """
    main_cfg, create_cfg, system_cfg = _load(input_cfg)
    if system_cfg is None:
        raise ConfigError(
            'parallel mode needs a system_config (coordinator, path_data, path_policy, ...) in the config file'
        )
    if exp_name:
        main_cfg.exp_name = exp_name
    if console_level_problem(main_cfg.get('console'), 'console') is None:  # a bad value: the config check names it
        set_console_level(main_cfg.get('console'))
    run_started = time.time()
    replay = check_parallel_replay(main_cfg)
    secret = _run_secret(system_cfg, replay_address=replay.replay_address if replay is not None else None)
    warm = WarmWorkers(
        expected_local_workers(main_cfg, system_cfg),
        os.path.join('.', main_cfg.get('exp_name') or 'default_experiment'),
        secret,
    )
    stop_request = StopRequest()  # Ctrl-C / SIGTERM: acted on by the loops below (ding.utils.stop_request)
    try:
        # Resume check, compile, config checks: in another process, so that this one (the coordinator) never
        # imports torch (see ding.entry.parallel_prepare): a warm worker, else a child of its own.
        with signals_request_stop(stop_request):
            cfg, resume_path = prepare_run(main_cfg, create_cfg, system_cfg, seed, resume, warm.answer)
            stop_request.check()
        exp = cfg.main.exp_name
        run_dir = os.path.join('.', exp, 'run')
        log_dir = os.path.join('.', exp, 'log')
        for d in (run_dir, log_dir, cfg.system.path_data, cfg.system.path_policy):
            os.makedirs(d, exist_ok=True)
        config_json = os.path.abspath(os.path.join('.', exp, 'parallel_config.json'))
        write_config_json(cfg, config_json)
    except BaseException:  # a bad config: no worker was handed anything
        warm.discard()
        raise

    # Workers on this machine are launched here; one whose host is another machine is started there by the
    # user (``python -m ding.entry.parallel_worker ...``) and the coordinator connects to it once it serves.
    workers = [
        WorkerProcess(role, name, config_json, run_dir, log_dir, bool(disable_flask_log), secret)
        for role in ('learner', 'collector')
        for name, entry in cfg.system[role].items()
        if is_local_host(entry.host)
    ]
    coordinator: Coordinator | None = None
    service: Any = None
    progress = RunProgress(exp, max_env_step)
    stop_value = cfg.main.env.get('stop_value')
    solved, reason = False, 'interrupted'
    with signals_request_stop(stop_request):
        try:
            # Collectors first: the warm worker that compiled the config imported the env and collector classes.
            for w in sorted(workers, key=lambda w: w.role != 'collector'):
                w.launch(warm.take(cfg.system[w.role][w.name]))
            warm.discard()
            wait_ready(workers, cfg, config_json, ready_timeout, stop_event, stop_request)
            coordinator = Coordinator(
                cfg,
                max_env_step=max_env_step,
                max_train_iter=max_train_iter,
                log_to_console=bool(enable_total_log),
                resume=resume_path,
                run_started=run_started,
                secret=secret,
            )
            service = _start_service(cfg, coordinator)
            coordinator.start()
            if coordinator.interaction.master.port != cfg.system.coordinator.port:  # 'auto' port taken meanwhile
                cfg.system.coordinator.port = coordinator.interaction.master.port
                write_config_json(cfg, config_json)
            reason = supervise(coordinator, workers, cfg, config_json, progress, stop_event, stop_request)
            solved = coordinator.solved
        except BaseException as exc:
            reason = 'interrupted' if isinstance(exc, KeyboardInterrupt) else f'error: {exc}'
            raise
        finally:
            try:
                if coordinator is not None:
                    coordinator.close()
                    coordinator.save_state()
            finally:
                if service is not None:
                    service.end_run(solved, reason)
                    service.close()
                warm.discard()
                stop_workers(workers)
                if os.path.isdir(run_dir) and not os.listdir(run_dir):
                    os.rmdir(run_dir)
                summary = coordinator.summary() if coordinator is not None else {}
                if coordinator is not None:
                    record_evaluations(coordinator, progress)  # one that ended the run after the last look
                best = summary.get('best_eval_return')
                progress.close(
                    solved,
                    int(summary.get('env_step', 0)),
                    int(summary.get('train_iter', 0)),
                    best,
                    stop_value,
                    reason,
                    seed,
                )
    if coordinator is not None and coordinator.config_refusal:  # no retry can succeed: fail the run
        raise ConfigError(f'the run ended: {coordinator.config_refusal}')
    if coordinator is not None and coordinator.storage_refusal:  # the disk refused a file: fail the run (exit 1)
        raise StorageError(f'the run ended: {coordinator.storage_refusal}')
    return ParallelResult(
        exp,
        solved,
        reason,
        int(summary.get('env_step', 0)),
        int(summary.get('train_iter', 0)),
        progress.elapsed,
        float(summary.get('best_eval_return', float('-inf'))),
        {w.name: w.restarts for w in workers},
        summary,
    )


def _run_secret(system_cfg: EasyDict, replay_address: str | None = None) -> str:
    """The secret the coordinator proves to its workers: from ``system.secret_file`` or ``$DING_RUN_SECRET``
    (multi-host runs, where each host's workers need the same one), else a fresh one for this run; with a
    ``replay_address``, the replay server's too, so it must be given."""
    try:
        secret = resolve_run_secret(system_cfg.get('secret_file'))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if secret is None and replay_address is not None:
        raise ConfigError(
            f'parallel config: policy.other.replay_buffer.replay_address = {replay_address!r} needs the run secret '
            f'of the replay server: set ${RUN_SECRET_ENV} (or system_config.secret_file) to the same secret'
        )
    return secret if secret is not None else new_run_secret()


def _start_service(cfg: EasyDict, coordinator: Any) -> Any:
    """The coordinator's run service (``run.json``, ``/run/*``, ``/metrics``, ``/healthz``), or None."""
    if not cfg.main.get('service'):
        return None  # no service section: the service modules (which import torch) stay unloaded
    from ding.service.hooks import service_enabled, start_service  # deferred: ding.service imports torch

    if not service_enabled(cfg.main):
        return None
    runtime = start_service(
        cfg.main.get('service'),
        cfg.main.exp_name,
        instance='coordinator',
        serve_weights=False,
        log=coordinator.info,
        tls=TlsSettings.from_config(cfg.system.get('tls')),
    )
    try:
        coordinator.attach_service(runtime)  # registers its tunables through the runtime (gauges included)
        runtime.emit('run_start', exp_name=cfg.main.exp_name, pid=os.getpid(), tunable=runtime.control.tunable_keys)
    except BaseException:
        runtime.close()
        raise
    return runtime


__all__ = [
    'parallel_pipeline',
    'ParallelResult',
    'WorkerProcess',
    'WarmWorkers',
    'expected_local_workers',
    'stop_workers',
    'record_evaluations',
    'READY_TIMEOUT',
    'MAX_RESTARTS',
    'STATE_SAVE_INTERVAL',
    'STOP_WAIT',
]
