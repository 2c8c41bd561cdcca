"""The ``system`` section of a parallel config: every process's address, filled by ``parallel_transform``.

One entry per learner (``learner0``, ...) and collector (``collector0``, ...) with its host and port, the shared
``path_data`` / ``path_policy`` directories, and the coordinator's address (``compile_config_parallel`` in
``ding.config.parallel`` calls it after compiling the main section).

Ports: ``'auto'`` ports are chosen by binding port 0 on the host and releasing it. Another process
could take such a port before the worker binds it (a small race); the parallel pipeline handles it:
a worker whose port is taken exits with a distinct code and is restarted on a fresh port, and every
worker reports the port it really listens on through its ready file.
"""

from __future__ import annotations

import copy
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from easydict import EasyDict

from .errors import ConfigError
from .merge import deep_merge_dicts

LOCAL_HOST = '127.0.0.1'
DEFAULT_SYSTEM: dict[str, Any] = dict(
    coordinator=dict(),
    path_data=None,
    path_policy=None,
    communication_mode='auto',
    learner_gpu_num=0,
)
DATA_PARALLEL = 'data_parallel'


# ---- free ports ---------------------------------------------------------------------------------
def find_free_port(host: str = LOCAL_HOST, taken: set | None = None) -> int:
    """A port that was free on ``host`` a moment ago (bind to port 0, read it, release it)."""
    taken = taken if taken is not None else set()
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port
    raise ConfigError(f'could not find a free port on {host}')


def can_bind(host: str) -> bool:
    """Whether ``host`` is an address of this machine."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
        return True
    except OSError:
        return False


# ---- system section -----------------------------------------------------------------------------
def _host_for(hosts: None | str | Sequence[str], index: int, default: str) -> str:
    if hosts is None:
        return default
    if isinstance(hosts, str):
        return hosts
    hosts = list(hosts)
    if not hosts:
        return default
    return hosts[index % len(hosts)]


def _resolve_port(entry: dict[str, Any], where: str, taken: set) -> None:
    port = entry.get('port', 'auto')
    if port in (None, 'auto'):
        host = entry['host']
        bind_host = '0.0.0.0' if host in ('0.0.0.0', '') else host
        if not can_bind(bind_host):
            raise ConfigError(
                f"system config: {where}.port is 'auto' but host '{host}' is not this machine; "
                f'give {where}.port explicitly'
            )
        entry['port'] = find_free_port(bind_host, taken)
    elif isinstance(port, bool) or not isinstance(port, int) or not 0 < port <= 65535:
        raise ConfigError(f"system config: {where}.port must be 'auto' or an int in [1, 65535], got {port!r}")
    else:
        taken.add(port)


def parallel_transform(
    cfg: Mapping[str, Any],
    coordinator_host: str | None = None,
    learner_host: None | str | Sequence[str] = None,
    collector_host: None | str | Sequence[str] = None,
) -> EasyDict:
    """Fill ``cfg.system`` (``cfg`` holds ``main`` and ``system``) with every process's address.

    Result: ``system.coordinator.{host, port, learner, collector}`` (the last two map each worker name to
    ``[name, host, port]``, DI-engine's layout), ``system.learner.learnerI`` and
    ``system.collector.collectorI`` with ``type``, ``import_names``, ``host``, ``port``, ``path_data``,
    ``path_policy`` (entries the user already wrote there are kept and completed), and absolute
    ``path_data`` / ``path_policy`` (default ``./{exp_name}/data`` and ``./{exp_name}/policy``; the text
    ``{exp_name}`` in a given path is replaced by the experiment name).
    """
    out = EasyDict(copy.deepcopy(dict(cfg)))
    main, system = out.main, EasyDict(deep_merge_dicts(DEFAULT_SYSTEM, out.get('system') or {}))
    exp_name = main.get('exp_name', 'default_experiment')
    learner_num = int(main.policy.learn.learner.get('learner_num', 1))
    collector_num = int(main.policy.collect.collector.get('collector_num', 1))
    if learner_num < 1 or collector_num < 1:
        raise ConfigError(
            f'parallel config: need learner_num >= 1 and collector_num >= 1, got '
            f'learner_num={learner_num}, collector_num={collector_num}'
        )
    if system.communication_mode != 'auto':
        raise ConfigError(f"system config: communication_mode must be 'auto', got {system.communication_mode!r}")
    # '{exp_name}' in a path follows the experiment name (e.g. when the CLI adds a seed suffix).
    system.path_data = os.path.abspath((system.path_data or './{exp_name}/data').replace('{exp_name}', exp_name))
    system.path_policy = os.path.abspath((system.path_policy or './{exp_name}/policy').replace('{exp_name}', exp_name))

    taken: set = set()
    coordinator = system.coordinator
    coordinator.host = coordinator_host or coordinator.get('host') or LOCAL_HOST
    # Kept in the compiled config (a rerun of the saved one keeps it): the coordinator may then listen on another
    # free port if this one is taken by the time it starts (see ding.worker.coordinator.worker_links).
    coordinator.port_auto = bool(coordinator.get('port_auto')) or coordinator.get('port', 'auto') in (None, 'auto')
    _resolve_port(coordinator, 'coordinator', taken)

    def workers(kind: str, num: int, comm_key: str, hosts: Any) -> dict[str, Any]:
        comm = system.get(comm_key) or {}
        if not comm.get('type'):
            raise ConfigError(f"parallel config: create_config.{comm_key}.type is missing (e.g. 'flask_fs')")
        given = system.get(kind) or {}
        out = {}
        for i in range(num):
            name = f'{kind}{i}'
            entry = dict(given.get(name) or {})
            entry.setdefault('type', comm['type'])
            entry.setdefault('import_names', list(comm.get('import_names', [])))
            entry['host'] = (
                entry.get('host') if entry.get('host') not in (None, 'auto') else _host_for(hosts, i, LOCAL_HOST)
            )
            _resolve_port(entry, f'{kind}.{name}', taken)
            entry.setdefault('path_data', system.path_data)
            entry.setdefault('path_policy', system.path_policy)
            out[name] = entry
        return out

    system.learner = workers('learner', learner_num, 'comm_learner', learner_host)
    system.collector = workers('collector', collector_num, 'comm_collector', collector_host)
    if learner_num > 1 and data_parallel(main):
        # The process group's rendezvous: rank 0 (learner0) opens it on its host.
        port = coordinator.get('dist_port')
        if port not in (None, 'auto') and (
            isinstance(port, bool) or not isinstance(port, int) or not 0 < port <= 65535
        ):
            raise ConfigError(
                f"system config: coordinator.dist_port must be None, 'auto' or an int in [1, 65535], got {port!r}"
            )
        host = system.learner.learner0['host']
        if port in (None, 'auto'):
            bind_host = '0.0.0.0' if host in ('0.0.0.0', '') else host
            if not can_bind(bind_host):
                raise ConfigError(
                    f"system config: coordinator.dist_port is 'auto' but learner0's host '{host}' (where the "
                    'learners meet) is not this machine; give coordinator.dist_port explicitly'
                )
            port = find_free_port(bind_host, taken)
        taken.add(port)
        coordinator.dist_port = port
    coordinator.learner = {k: [k, v['host'], v['port']] for k, v in system.learner.items()}
    coordinator.collector = {k: [k, v['host'], v['port']] for k, v in system.collector.items()}
    out.system = EasyDict(system)
    return out


def data_parallel(main: Mapping[str, Any]) -> bool:
    """Whether the learners of this (compiled) main config train one policy together."""
    multi = main['policy']['learn']['learner'].get('multi_learner') or {}
    return multi.get('mode') == DATA_PARALLEL


__all__ = [
    'DATA_PARALLEL',
    'DEFAULT_SYSTEM',
    'LOCAL_HOST',
    'can_bind',
    'data_parallel',
    'find_free_port',
    'parallel_transform',
]
