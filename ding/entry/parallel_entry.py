"""The parallel pipeline: a coordinator in this process, each learner and collector in its own process.

``parallel_pipeline(cfg_file, seed)`` compiles the config, starts every worker process
(``python -m ding.entry.parallel_worker``), waits until each one serves, runs the coordinator until the
commander ends the run (stop value reached) or a limit is hit, restarts worker processes that die on
the way, and on every exit path (end of run, error, Ctrl-C, SIGTERM) stops all of them: SIGTERM, a
grace period, then SIGKILL. Each worker's output goes to ``./{exp_name}/log/{name}.log``.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from easydict import EasyDict

from ding.config.errors import ConfigError
from ding.config.loader import read_config
from ding.config.parallel import find_free_port
from ding.config.writer import redact_secrets
from ding.interaction.base.auth import RUN_SECRET_ENV, new_run_secret, resolve_run_secret
from ding.utils.atomic_file import StorageError
from ding.utils.console import console_level_problem, set_console_level
from ding.utils.jsonable import to_jsonable
from ding.utils.stop_request import StopRequest, signals_request_stop
from ding.utils.tls import TlsSettings
from ding.worker.coordinator.coordinator import Coordinator
from ding.worker.replay_service import check_parallel_replay

from .parallel_prepare import prepare_run
from .parallel_processes import WarmWorkers, WorkerProcess, expected_local_workers, is_local_host, stop_workers
from .parallel_worker import EXIT_PORT_IN_USE
from .progress import RunProgress

# Seconds a worker has to come up (import torch, build its slave) before the run is abandoned.
READY_TIMEOUT = 120.0
# A worker that dies more often than this is not restarted again: the run fails with its log.
MAX_RESTARTS = 5
# seconds between two writes of ./{exp}/coordinator_state.json (env steps etc. for --resume)
STATE_SAVE_INTERVAL = 1.0
# Seconds to wait for a killed worker to be reaped before it is relaunched.
STOP_WAIT = 10.0


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


def _write_json(cfg: dict[str, Any], path: str) -> None:
    tmp = f'{path}.{os.getpid()}.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(redact_secrets(to_jsonable(cfg)), f, indent=1)  # workers read no secret from it
    os.replace(tmp, path)


def _new_port(cfg: EasyDict, role: str, name: str) -> int:
    entry = cfg.system[role][name]
    port = find_free_port(entry.host)
    entry.port = port
    cfg.system.coordinator[role][name] = [name, entry.host, port]
    return port


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
        _write_json(cfg, config_json)
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
            _wait_ready(workers, cfg, config_json, ready_timeout, stop_event, stop_request)
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
            reason = _supervise(coordinator, workers, cfg, config_json, progress, stop_event, stop_request)
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


def _relaunch_on_new_port(w: WorkerProcess, cfg: EasyDict, config_json: str) -> int:
    port = _new_port(cfg, w.role, w.name)
    _write_json(cfg, config_json)
    w.launch()
    return port


def _wait_ready(
    workers: list[WorkerProcess],
    cfg: EasyDict,
    config_json: str,
    timeout: float,
    stop_event: threading.Event | None = None,
    stop_request: StopRequest | None = None,
) -> None:
    """Block until every worker serves; a taken port gets a fresh one, any other early exit is an error."""
    deadline = time.time() + timeout
    pending = list(workers)
    while pending:
        if stop_request is not None:
            stop_request.check()
        if stop_event is not None and stop_event.is_set():
            raise KeyboardInterrupt('stop_event set while the workers were starting')
        for w in list(pending):
            if w.check_ready():
                pending.remove(w)
                _adopt_port(w, cfg)
                continue
            code = w.poll()
            if code is None:
                continue
            if code == EXIT_PORT_IN_USE and w.restarts < MAX_RESTARTS:
                w.restarts += 1
                _relaunch_on_new_port(w, cfg, config_json)
                continue
            raise RuntimeError(
                f'{w.role} {w.name} exited with code {code} before serving; '
                f'its log ({w.log_path}) ends with:\n{w.log_tail()}'
            )
        if pending and time.time() > deadline:
            names = ', '.join(w.name for w in pending)
            raise RuntimeError(
                f'workers not serving after {timeout:.0f}s: {names} (see {workers[0].log_path} '
                f'and the other logs in its folder)'
            )
        time.sleep(0.05)
    _write_json(cfg, config_json)


def _adopt_port(w: WorkerProcess, cfg: EasyDict) -> bool:
    """Use the port the worker reports (True if it differs from the config's)."""
    port = int(w.ready_info.get('port', 0)) if w.ready_info else 0
    entry = cfg.system[w.role][w.name]
    if port and port != entry.port:
        entry.port = port
        cfg.system.coordinator[w.role][w.name] = [w.name, entry.host, port]
        return True
    return False


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


def _replace_squatted(
    coordinator: Any,
    workers: list[WorkerProcess],
    restarting: list[WorkerProcess],
    moved: set[str],
    cfg: EasyDict,
    config_json: str,
) -> None:
    """Workers the coordinator found held by someone else (bound to another master, or their port answered by
    a process without this run's secret): stop the one this pipeline launched, start it again on a new port."""
    for kind, name in coordinator.take_squatted_workers():
        w = next((w for w in workers if w.role == kind and w.name == name), None)
        if w is None:
            coordinator.error(f'{kind} {name} is held by someone else and runs on another host: replace it there')
            continue
        if w in restarting:
            if not w.check_ready():
                continue  # not serving yet: what answered on its port is someone else, and it cannot bind there
            restarting.remove(w)
        if w.restarts >= MAX_RESTARTS:
            raise RuntimeError(f'{kind} {name} was held by someone else after {w.restarts} restarts; giving up')
        w.kill()
        w.wait(STOP_WAIT)
        coordinator.notify_worker_dead(kind, name)
        w.restarts += 1
        port = _relaunch_on_new_port(w, cfg, config_json)
        moved.add(name)
        restarting.append(w)
        coordinator.error(f'{kind} {name} was held by someone else: replaced it on port {port} (restart {w.restarts})')


def record_evaluations(coordinator: Coordinator, progress: RunProgress) -> None:
    """The commander's evaluations not yet shown: an ``[eval]`` line and a ``log/eval.jsonl`` record each."""
    history = getattr(coordinator.commander, 'eval_history', [])
    for evaluation in history[progress.evaluations :]:
        progress.record_eval(evaluation['reward_mean'], evaluation['envstep'], evaluation['policy_iter'])


def _supervise(
    coordinator: Any,
    workers: list[WorkerProcess],
    cfg: EasyDict,
    config_json: str,
    progress: Any,
    stop_event: threading.Event | None = None,
    stop_request: StopRequest | None = None,
) -> str:
    """Run until the coordinator ends the run; restart workers that die meanwhile. Returns the end reason."""
    restarting: list[WorkerProcess] = []
    moved: set[str] = set()  # relaunched on a new port: the coordinator connects there once it serves
    while not coordinator.system_shutdown_flag:
        if stop_request is not None:
            stop_request.check()
        coordinator.poll_service()  # run control: tunes, pause / resume, terminate (between rounds)
        coordinator.save_state(min_interval=STATE_SAVE_INTERVAL)  # the counters --resume continues from
        if coordinator.system_shutdown_flag:
            break
        if stop_event is not None and stop_event.wait(0.1):
            return 'stopped'
        elif stop_event is None:
            time.sleep(0.1)
        for w in workers:
            code = w.poll()
            if code is None or w in restarting:
                continue
            if w.restarts >= MAX_RESTARTS:
                raise RuntimeError(
                    f'{w.role} {w.name} died {w.restarts + 1} times (last exit code {code}); '
                    f'its log ({w.log_path}) ends with:\n{w.log_tail()}'
                )
            coordinator.notify_worker_dead(w.role, w.name)
            w.restarts += 1
            if code == EXIT_PORT_IN_USE:
                _relaunch_on_new_port(w, cfg, config_json)
                moved.add(w.name)
            else:
                w.launch()
            coordinator.info(f'{w.role} {w.name} exited with code {code}: restarted it (restart {w.restarts})')
            restarting.append(w)
        _replace_squatted(coordinator, workers, restarting, moved, cfg, config_json)
        for w in list(restarting):
            if w.check_ready():
                restarting.remove(w)
                if _adopt_port(w, cfg) or w.name in moved:
                    moved.discard(w.name)
                    coordinator.update_worker_address(
                        w.role, w.name, cfg.system[w.role][w.name].host, cfg.system[w.role][w.name].port
                    )
        record_evaluations(coordinator, progress)
        progress.update(coordinator.env_step, coordinator.train_iter)
    return coordinator.shutdown_reason


__all__ = [
    'parallel_pipeline',
    'ParallelResult',
    'WorkerProcess',
    'WarmWorkers',
    'expected_local_workers',
    'stop_workers',
]
