"""One learner or collector process of the parallel pipeline.

``python -m ding.entry.parallel_worker --role learner --name learner0 --config ./EXP/parallel_config.json``
builds the comm learner (``create_comm_learner``) or comm collector (``create_comm_collector``) from
the worker's ``system`` entry, starts its slave and serves until SIGTERM / SIGINT, or until the
process that launched it is gone: a worker the pipeline launched gets SIGTERM when the pipeline dies, from
its first instant (``ding.entry.lifeline``), so that a killed pipeline leaves no worker behind.

Once serving, it writes a ready file (``--ready-file``, JSON ``{pid, role, name, host, port}``,
written atomically) that tells the pipeline the worker is up and on which port it really listens.
A worker whose port is taken exits with ``EXIT_PORT_IN_USE`` so that the pipeline can pick another.

``python -m ding.entry.parallel_worker --warm EXP_DIR`` is a worker started before the pipeline's config is
compiled: it imports torch meanwhile (the slowest part of a worker's start), then reads one JSON line from
its standard input, ``{role, name, config, ready_file, log, enable_flask_log}``, sends its output to that
log file and runs as that worker. Before that, a line ``{"prepare": [REQUEST, ANSWER]}`` has it compile the
run's config as the compile child would (``ding.entry.parallel_prepare``), with the torch it has imported
already. An empty input (the pipeline closed it) ends it at once, having written nothing.
"""

from __future__ import annotations

import argparse
import copy
import errno
import importlib
import json
import logging
import os
import signal
import sys
import threading
from typing import Any

from easydict import EasyDict

from ding.interaction.base.auth import RUN_SECRET_ENV, resolve_run_secret
from ding.utils import set_pkg_seed
from ding.utils.registry import COMM_COLLECTOR_REGISTRY, COMM_LEARNER_REGISTRY, import_module
from ding.worker.task_fields import config_import_names

from .lifeline import die_with_launcher
from .startup import limit_openmp_threads

ROLES = ('learner', 'collector')
EXIT_PORT_IN_USE = 98
EXIT_CONFIG_ERROR = 2
# Intra-op threads of a warm worker's torch (sized at import): it may become a worker whose torch_threads is this.
WARM_TORCH_THREADS = 1
# How often a worker checks that the pipeline that launched it still exists.
PARENT_CHECK_SECONDS = 1.0
# Longest a worker spends closing once the pipeline that launched it is gone (ding.entry.lifeline).
ORPHAN_CLOSE_SECONDS = 10


def load_parallel_config(path: str) -> EasyDict:
    """Read the compiled config the pipeline wrote as JSON; errors name the file."""
    try:
        with open(path, encoding='utf-8') as f:
            cfg = json.load(f)
    except OSError as exc:
        raise ValueError(f"parallel worker: cannot read config '{path}': {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"parallel worker: config '{path}' is not valid JSON: {exc}") from None
    if not isinstance(cfg, dict) or 'main' not in cfg or 'system' not in cfg:
        raise ValueError(f"parallel worker: config '{path}' must hold 'main' and 'system' sections")
    return EasyDict(cfg)


def worker_config(cfg: EasyDict, role: str, name: str) -> EasyDict:
    """The worker's own config: its ``system.{role}.{name}`` entry plus the shared paths and names it needs."""
    if role not in ROLES:
        raise ValueError(f"parallel worker: role must be one of {ROLES}, got '{role}'")
    entries = cfg.system.get(role, {}) or {}
    if name not in entries:
        raise KeyError(f"parallel worker: no {role} named '{name}' in system.{role} (known: {sorted(entries)})")
    wcfg = EasyDict(copy.deepcopy(dict(entries[name])))
    wcfg.name = name
    wcfg.setdefault('path_data', cfg.system.path_data)
    wcfg.setdefault('path_policy', cfg.system.path_policy)
    wcfg.setdefault('exp_name', cfg.main.exp_name)
    wcfg.setdefault('seed', int(cfg.main.get('seed', 0)) + _index_of(name))
    # The only modules a task may have the worker import: those the run's own config names (ding.worker.task_fields).
    wcfg.setdefault('allowed_import_names', config_import_names(cfg.main))
    # The run's TLS files and server bounds (checked with the config), for the worker's slave.
    wcfg.setdefault('tls', cfg.system.get('tls'))
    wcfg.setdefault('http', cfg.system.get('http'))
    return wcfg


def _index_of(name: str) -> int:
    digits = ''.join(ch for ch in name if ch.isdigit())
    return int(digits) if digits else 0


def _port_in_use(error: BaseException) -> bool:
    seen = set()
    exc: BaseException | None = error
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
            return True
        if 'address already in use' in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _bound_port(comm: Any, default: int) -> int:
    """The port the worker's slave really listens on (the config's, unless the slave reports another)."""
    for owner in (comm, getattr(comm, '_slave', None), getattr(comm, 'slave', None)):
        if owner is None:
            continue
        for attr in ('port', '_port'):
            port = getattr(owner, attr, None)
            if isinstance(port, int) and port > 0:
                return port
    return int(default)


def create_comm(role: str, wcfg: EasyDict) -> Any:
    """``create_comm_learner(wcfg)`` / ``create_comm_collector(wcfg)``: the comm worker named by ``wcfg.type``.

    When the ``comm`` package of that side is absent, the registry is used directly (same result: the
    factory imports ``wcfg.import_names`` and builds the registered type).
    """
    package = 'ding.worker.learner.comm' if role == 'learner' else 'ding.worker.collector.comm'
    factory = 'create_comm_learner' if role == 'learner' else 'create_comm_collector'
    try:
        import importlib

        create = getattr(importlib.import_module(package), factory)
    except ModuleNotFoundError as exc:
        if exc.name is None or not package.startswith(exc.name):
            raise
        create = None
    except AttributeError:
        create = None
    if create is not None:
        return create(wcfg)
    registry = COMM_LEARNER_REGISTRY if role == 'learner' else COMM_COLLECTOR_REGISTRY
    import_module(wcfg.get('import_names', []) or [])
    return registry.build(wcfg.type, wcfg)


def _run_secret(cfg: EasyDict) -> str:
    """The run secret (``system.secret_file``, else ``$DING_RUN_SECRET``), required; taken out of the environment
    so that processes this worker starts (env subprocesses) do not inherit it."""
    secret = resolve_run_secret(cfg.system.get('secret_file'))
    os.environ.pop(RUN_SECRET_ENV, None)
    if secret is None:
        raise ValueError(f'no run secret: set system.secret_file or ${RUN_SECRET_ENV} (the pipeline sets it)')
    return secret


def write_ready_file(path: str, info: dict[str, Any]) -> None:
    """Atomic: the pipeline sees no file or the whole file."""
    tmp = f'{path}.{os.getpid()}.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(info, f)
    os.replace(tmp, path)


def bound_orphan_close() -> None:
    """A worker whose pipeline is gone closes gracefully (a learner saves its checkpoint) for at most
    ``ORPHAN_CLOSE_SECONDS``; then SIGALRM, left to its default action, ends the process."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(ORPHAN_CLOSE_SECONDS)


def run_worker(
    role: str,
    name: str,
    config_path: str,
    ready_file: str | None = None,
    disable_flask_log: bool = True,
    launcher_pid: int | None = None,
) -> int:
    """Build, start and serve one worker until told to stop, or until ``launcher_pid`` (default: the
    parent at this call) is no longer its parent; return the process exit code."""
    parent = os.getppid() if launcher_pid is None else launcher_pid
    try:
        cfg = load_parallel_config(config_path)
        wcfg = worker_config(cfg, role, name)
        wcfg.secret = _run_secret(cfg)
    except (ValueError, KeyError) as exc:
        print(f'ding parallel worker {name}: {exc}', file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR
    if disable_flask_log:
        logging.getLogger('werkzeug').disabled = True

    stop = threading.Event()

    def _on_signal(signum: int, frame: Any) -> None:
        if os.getppid() != parent:  # the pipeline died (its parent-death SIGTERM): nobody waits for this close
            bound_orphan_close()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)

    # Workers share the machine's cores: one intra-op thread each avoids oversubscription.
    threads = int(wcfg.get('torch_threads', 1))
    if 'torch' not in sys.modules:  # a warm worker has imported it with WARM_TORCH_THREADS (the pipeline checked)
        limit_openmp_threads(threads)
    import torch  # deferred: after limit_openmp_threads has sized torch's OpenMP pool

    torch.set_num_threads(threads)
    set_pkg_seed(int(wcfg.seed), use_cuda=False)
    comm = None
    try:
        comm = create_comm(role, wcfg)
        if role == 'learner' and hasattr(comm, 'add_learner_observer'):
            # The run service attaches from here: ding.worker does not import ding.service.
            from ding.service.comm_learner import (
                attach_comm_learner_service,  # deferred: imports torch, set up above after the thread limits
            )

            attach_comm_learner_service(comm)
        comm.start()
        port = _bound_port(comm, wcfg.port)
        if ready_file:
            write_ready_file(
                ready_file, {'pid': os.getpid(), 'role': role, 'name': name, 'host': wcfg.host, 'port': port}
            )
        print(
            f'ding parallel worker {name}: serving on {wcfg.host}:{port} (pid {os.getpid()})',
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(PARENT_CHECK_SECONDS):
            if os.getppid() != parent:
                print(f'ding parallel worker {name}: the pipeline is gone, stopping', file=sys.stderr, flush=True)
                bound_orphan_close()
                break
        return 0
    except Exception as exc:
        if _port_in_use(exc):
            print(
                f'ding parallel worker {name}: port {wcfg.get("port")} is already in use', file=sys.stderr, flush=True
            )
            return EXIT_PORT_IN_USE
        raise
    finally:
        if comm is not None:
            try:
                comm.close()
            except Exception as exc:  # the process exits anyway; say why the close was not clean
                print(f'ding parallel worker {name}: error while closing: {exc!r}', file=sys.stderr, flush=True)


def run_warm(assignments: Any = None, launcher_pid: int | None = None) -> int:
    """``--warm``: import torch, then become the worker the pipeline names on ``assignments`` (standard input
    by default; see the module doc). Returns the worker's exit code, 0 when no worker was asked for."""
    limit_openmp_threads(WARM_TORCH_THREADS)
    # What every worker imports, done before the assignment comes; deferred so as to size the OpenMP pool first.
    importlib.import_module('torch')  # deferred: after limit_openmp_threads
    importlib.import_module('ding.interaction')  # deferred: Flask and werkzeug, which both roles serve with
    assignments = assignments or sys.stdin
    while True:
        line = assignments.readline()
        if not line.strip():
            return 0
        try:
            task = json.loads(line)
            if isinstance(task, dict) and 'prepare' in task:  # compile the run's config first (parallel_prepare)
                from .parallel_prepare import answer_request  # deferred: only the worker that compiles the config

                request, answer = task['prepare']
                answer_request(request, answer)
                continue
            role, name, config, ready_file, log = (task[k] for k in ('role', 'name', 'config', 'ready_file', 'log'))
            break
        except (ValueError, KeyError, TypeError) as exc:
            print(f'ding parallel worker (warm): bad assignment {line[:200]!r}: {exc!r}', file=sys.stderr, flush=True)
            return EXIT_CONFIG_ERROR
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return run_worker(role, name, config, ready_file, not task.get('enable_flask_log', False), launcher_pid)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='python -m ding.entry.parallel_worker',
        description='Run one learner or collector of the parallel pipeline.',
    )
    p.add_argument(
        '--warm',
        metavar='EXP_DIR',
        help='import torch, then read which worker to be from stdin (EXP_DIR: the run it is for, shown by ps)',
    )
    p.add_argument('--role', choices=ROLES)
    p.add_argument('--name', help='the worker entry in system.learner / system.collector')
    p.add_argument('--config', help='parallel_config.json written by the pipeline')
    p.add_argument('--ready-file', help='file to write {pid, host, port} to once serving')
    p.add_argument('--enable-flask-log', action='store_true', help='keep the per-request HTTP log')
    return p


def main(argv: list[str] | None = None) -> int:
    # First of all: a worker the pipeline launched dies with it, whenever that happens (ding.entry.lifeline).
    launcher = die_with_launcher()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.warm:
        return run_warm(launcher_pid=launcher)
    if not (args.role and args.name and args.config):
        parser.error('--role, --name and --config are required (or --warm)')
    return run_worker(args.role, args.name, args.config, args.ready_file, not args.enable_flask_log, launcher)


if __name__ == '__main__':
    sys.exit(main())
