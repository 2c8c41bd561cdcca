"""Keeping the parallel pipeline's worker processes serving: waiting until each one serves, restarting the ones
that die during the run (on a fresh port when theirs was taken), replacing the ones someone else holds, and
showing the commander's evaluations as they come (``parallel_pipeline`` runs these around its coordinator)."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from easydict import EasyDict

from ding.config.parallel_system import find_free_port
from ding.config.writer import redact_secrets
from ding.utils.jsonable import to_jsonable
from ding.utils.stop_request import StopRequest
from ding.worker.coordinator.coordinator import Coordinator

from .parallel_processes import WorkerProcess
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


def write_config_json(cfg: dict[str, Any], path: str) -> None:
    """Write the compiled config the workers read (atomically, secrets redacted)."""
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


def _relaunch_on_new_port(w: WorkerProcess, cfg: EasyDict, config_json: str) -> int:
    port = _new_port(cfg, w.role, w.name)
    write_config_json(cfg, config_json)
    w.launch()
    return port


def wait_ready(
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
    write_config_json(cfg, config_json)


def _adopt_port(w: WorkerProcess, cfg: EasyDict) -> bool:
    """Use the port the worker reports (True if it differs from the config's)."""
    port = int(w.ready_info.get('port', 0)) if w.ready_info else 0
    entry = cfg.system[w.role][w.name]
    if port and port != entry.port:
        entry.port = port
        cfg.system.coordinator[w.role][w.name] = [w.name, entry.host, port]
        return True
    return False


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


def supervise(
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
    'MAX_RESTARTS',
    'READY_TIMEOUT',
    'STATE_SAVE_INTERVAL',
    'STOP_WAIT',
    'record_evaluations',
    'supervise',
    'wait_ready',
    'write_config_json',
]
