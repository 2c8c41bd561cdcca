"""Compiling a parallel-mode config: the main config plus the ``system`` section naming every process.

``compile_config_parallel(main, create, system, seed)`` merges the defaults of every component named in
``create_config`` (env, env manager, policy, parallel collector, learner, commander, replay buffer)
under the user's main config, validates it, and fills the system section with
``parallel_transform``: one entry per learner (``learner0``, ...) and collector (``collector0``, ...)
with its host and port, the shared ``path_data`` / ``path_policy`` directories, and the coordinator.

Ports: ``'auto'`` ports are chosen by binding port 0 on the host and releasing it. Another process
could take such a port before the worker binds it (a small race); the parallel pipeline handles it:
a worker whose port is taken exits with a distinct code and is restarted on a fresh port, and every
worker reports the port it really listens on through its ready file.
"""

from __future__ import annotations

import copy
import math
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from easydict import EasyDict

from ding.utils.registry import (
    BUFFER_REGISTRY,
    COMM_COLLECTOR_REGISTRY,
    COMM_LEARNER_REGISTRY,
    COMMANDER_REGISTRY,
    COORDINATOR_REGISTRY,
    ENV_MANAGER_REGISTRY,
    ENV_REGISTRY,
    LEARNER_REGISTRY,
    PARALLEL_COLLECTOR_REGISTRY,
    POLICY_REGISTRY,
    Registry,
    import_module,
)

from .errors import ConfigError
from .merge import deep_merge_dicts
from .system import check_system_config
from .validate import check_env_section, coerce_integers, fill_model_shapes, unknown_keys_allowed, validate_config
from .writer import redact_secrets

LOCAL_HOST = '127.0.0.1'
PLATFORMS = ('local',)

# Parallel-only keys (DI-engine names) with their defaults; they join the component defaults so the
# strict sections accept them.
PARALLEL_LEARNER_DEFAULTS = dict(
    learner_num=1,
    send_policy_freq=1,
    # several learners (docs/parallel.md, "Several learners"): 'failover' (spares that take over the one learner
    # task when its learner dies) or 'data_parallel' (every learner trains the one policy: one torch.distributed
    # group, gradients averaged every step); assignment of collectors' data to learners: 'random' (one shared
    # pool) or 'bins' (learner r owns a fixed range of collectors); on_group_done (bins): 'assist' (a learner
    # whose collectors are done reads the others' queues) or 'short' (the run ends when one group is exhausted);
    # backend 'gloo' (CPU) or 'nccl' (GPU); timeout: seconds a rank waits for the others (joining, collectives)
    multi_learner=dict(mode='failover', assignment='random', on_group_done='assist', backend='gloo', timeout=60.0),
)
DATA_PARALLEL = 'data_parallel'
PARALLEL_COLLECTOR_DEFAULTS = dict(collector_num=1, update_policy_second=3)
DEFAULT_SYSTEM: dict[str, Any] = dict(
    coordinator=dict(),
    path_data=None,
    path_policy=None,
    communication_mode='auto',
    learner_gpu_num=0,
)
# Modules whose import registers the built-in parallel components: looked up by name through the registries,
# as for policies and envs, so the config layer does not import the worker layer.
BUILTIN_COMMANDER_MODULES = (
    'ding.worker.coordinator.solo_parallel_commander',
    'ding.worker.coordinator.naive_parallel_commander',
)
BUILTIN_COORDINATOR_MODULES = ('ding.worker.coordinator.coordinator',)
BUILTIN_COMM_MODULES = {
    'learner': ('ding.worker.learner.comm.flask_fs_learner',),
    'collector': ('ding.worker.collector.comm.flask_fs_collector',),
}


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


def check_multi_learner(main: Mapping[str, Any]) -> None:
    """Settings that only make sense together (``ConfigError`` naming the keys): with 'data_parallel', every
    rank must train every batch it gets (a batch rejected by the learner's ``max_staleness`` would leave the
    ranks one step apart), and 'bins' needs a collector for each learner."""
    learner = main['policy']['learn']['learner']
    if not data_parallel(main):
        return
    staleness = learner.get('max_staleness')
    if staleness is not None and staleness != math.inf:
        raise ConfigError(
            'parallel config: policy.learn.learner.max_staleness must be left out with '
            "multi_learner.mode='data_parallel' (a rank dropping a batch would leave the ranks one step apart); "
            'bound the staleness in the coordinator instead: policy.other.replay_buffer.max_staleness'
        )
    learner_num = int(learner.get('learner_num', 1))
    collector_num = int(main['policy']['collect']['collector'].get('collector_num', 1))
    if learner['multi_learner'].get('assignment') == 'bins' and collector_num < learner_num:
        raise ConfigError(
            f"parallel config: multi_learner.assignment='bins' gives every learner its own collectors: "
            f'policy.collect.collector.collector_num ({collector_num}) must be >= '
            f'policy.learn.learner.learner_num ({learner_num})'
        )


# ---- main section -------------------------------------------------------------------------------
def _type_section(create_cfg: Mapping[str, Any], key: str, default: Mapping[str, Any] | None = None) -> EasyDict:
    """``create_cfg[key]`` (it needs a ``type``); ``default`` when it is missing, an error if there is none."""
    section = create_cfg.get(key)
    if section is None:
        if default is None:
            raise ConfigError(f'parallel config: create_config.{key} is missing (it names the {key} type)')
        section = default
    if not isinstance(section, Mapping) or not section.get('type'):
        raise ConfigError(f"parallel config: create_config.{key} needs a 'type', got {section!r}")
    return EasyDict(copy.deepcopy(dict(section)))


def _cls_of(registry: Registry, section: Mapping[str, Any], builtin: Sequence[str] = ()) -> Any:
    """The class ``section.type`` names, after importing ``section.import_names`` (and, if it is not
    registered then, the ``builtin`` modules)."""
    import_module(section.get('import_names', []) or [])
    if section['type'] not in registry:
        import_module(builtin)
    try:
        return registry.get_cls(section['type'])
    except KeyError as exc:
        raise ConfigError(f'parallel config: {exc.args[0]}') from None


def _defaults_of(cls: Any) -> EasyDict:
    if hasattr(cls, 'default_config'):
        return EasyDict(cls.default_config())
    return EasyDict(copy.deepcopy(getattr(cls, 'config', {}) or {}))


def _component_defaults(create_cfg: Mapping[str, Any]) -> EasyDict:
    """The tree of component defaults that the user's main config is merged over."""
    env_c = _type_section(create_cfg, 'env')
    manager_c = _type_section(create_cfg, 'env_manager')
    policy_c = _type_section(create_cfg, 'policy')
    learner_c = _type_section(create_cfg, 'learner', {'type': 'base'})
    collector_c = _type_section(create_cfg, 'collector')
    commander_c = _type_section(create_cfg, 'commander', {'type': 'solo'})
    buffer_c = _type_section(create_cfg, 'replay_buffer', {'type': 'advanced'})

    env_cfg = _defaults_of(_cls_of(ENV_REGISTRY, env_c, ['ding.envs']))
    env_cfg.update(env_c)
    env_cfg.manager = deep_merge_dicts(_defaults_of(_cls_of(ENV_MANAGER_REGISTRY, manager_c, ['ding.envs'])), manager_c)
    policy_cfg = _defaults_of(_cls_of(POLICY_REGISTRY, policy_c, ['ding.policy']))
    policy_cfg.type = policy_c.type
    if policy_c.get('import_names'):
        policy_cfg.import_names = policy_c.import_names
    for section in ('learn', 'collect', 'eval', 'other'):
        policy_cfg.setdefault(section, EasyDict())
    learner_cfg = deep_merge_dicts(
        PARALLEL_LEARNER_DEFAULTS, _defaults_of(_cls_of(LEARNER_REGISTRY, learner_c, ['ding.worker.learner']))
    )
    policy_cfg.learn.learner = deep_merge_dicts(learner_cfg, learner_c)
    collector_cls = _cls_of(
        PARALLEL_COLLECTOR_REGISTRY, collector_c, ['ding.worker.collector.zergling_parallel_collector']
    )
    collector_cfg = deep_merge_dicts(PARALLEL_COLLECTOR_DEFAULTS, _defaults_of(collector_cls))
    policy_cfg.collect.collector = deep_merge_dicts(collector_cfg, collector_c)
    commander_cls = _cls_of(COMMANDER_REGISTRY, commander_c, BUILTIN_COMMANDER_MODULES)
    policy_cfg.other.commander = deep_merge_dicts(_defaults_of(commander_cls), commander_c)
    buffer_cfg = _defaults_of(_cls_of(BUFFER_REGISTRY, buffer_c, ['ding.worker.replay_buffer']))
    policy_cfg.other.replay_buffer = deep_merge_dicts(buffer_cfg, buffer_c)
    return EasyDict({'env': env_cfg, 'policy': policy_cfg})


def compile_config_parallel(
    cfg: Mapping[str, Any],
    create_cfg: Mapping[str, Any],
    system_cfg: Mapping[str, Any] | None,
    seed: int = 0,
    save_cfg: bool = True,
    save_path: str = 'total_config.py',
    platform: str = 'local',
    coordinator_host: str | None = None,
    learner_host: None | str | list[str] = None,
    collector_host: None | str | list[str] = None,
) -> EasyDict:
    """Return ``EasyDict(main=<compiled main config>, system=<filled system config>)``.

    The main config is validated against the component defaults (unknown keys in strict sections,
    types, bounds: ``ConfigError`` listing every problem). With ``save_cfg`` the result is written to
    ``./{exp_name}/{save_path}`` as a Python file defining ``main_config``, ``create_config`` and
    ``system_config``.
    """
    if platform not in PLATFORMS:
        raise ConfigError(f'compile_config_parallel: platform {platform!r} is not supported (supported: {PLATFORMS})')
    user_cfg = EasyDict(copy.deepcopy(dict(cfg)))
    create = EasyDict(copy.deepcopy(dict(create_cfg)))
    system = EasyDict(copy.deepcopy(dict(system_cfg or {})))
    defaults = _component_defaults(create)
    allow_all = unknown_keys_allowed()
    try:
        validate_config(user_cfg, defaults, allow_unknown_keys=allow_all)
    except ConfigError as exc:
        raise ConfigError(f'parallel config: {exc}') from None
    user_commander = ((user_cfg.get('policy') or {}).get('other') or {}).get('commander') or {}
    main = deep_merge_dicts(defaults, user_cfg)
    coerce_integers(main, defaults)  # e.g. comm_batches=2.0: the workers check for an int
    env_cls = _cls_of(ENV_REGISTRY, _type_section(create, 'env'), ['ding.envs'])
    try:
        check_env_section(env_cls, main.env, allow_all or user_cfg.get('allow_unknown_keys') is True)
    except ConfigError as exc:
        raise ConfigError(f'parallel config: {exc}') from None
    fill_model_shapes(env_cls, main)
    check_multi_learner(main)
    main.seed = seed
    main.setdefault('exp_name', 'default_experiment')
    commander = main.policy.other.commander
    if 'collector_task_space' not in user_commander:
        # One collector task per collector unless the user says otherwise.
        commander.collector_task_space = int(main.policy.collect.collector.collector_num)
    if 'stop_value' in main.env and 'n_evaluator_episode' in main.env:
        main.policy.eval.setdefault('evaluator', EasyDict())
        main.policy.eval.evaluator.stop_value = main.env.stop_value
        main.policy.eval.evaluator.n_episode = main.env.n_evaluator_episode

    for key in ('comm_learner', 'comm_collector'):
        system[key] = _type_section(create, key)
    coordinator_cls = _cls_of(COORDINATOR_REGISTRY, EasyDict(type='coordinator'), BUILTIN_COORDINATOR_MODULES)
    _check_system(system, main, coordinator_cls, allow_all)
    out = parallel_transform(EasyDict(main=main, system=system), coordinator_host, learner_host, collector_host)
    out.main.policy.other.commander.path_policy = out.system.path_policy  # DI-engine keeps it here too
    out.system.coordinator = deep_merge_dicts(coordinator_cls.default_config(), out.system.coordinator)
    out.seed = seed
    if save_cfg:
        save_parallel_config(out, create, os.path.join('.', main.exp_name, save_path))
    return out


def _check_system(system: EasyDict, main: EasyDict, coordinator_cls: Any, allow_unknown_keys: bool) -> None:
    """The user's system section against the coordinator's and the comm workers' defaults (before any port is
    taken or file written): ``ConfigError`` naming every bad key."""
    comm_defaults = {
        'learner': _defaults_of(_cls_of(COMM_LEARNER_REGISTRY, system.comm_learner, BUILTIN_COMM_MODULES['learner'])),
        'collector': _defaults_of(
            _cls_of(COMM_COLLECTOR_REGISTRY, system.comm_collector, BUILTIN_COMM_MODULES['collector'])
        ),
    }
    counts = {
        'learner': main.policy.learn.learner.get('learner_num', 1),
        'collector': main.policy.collect.collector.get('collector_num', 1),
    }
    names = {kind: [f'{kind}{i}' for i in range(int(num))] for kind, num in counts.items()}
    try:
        check_system_config(system, coordinator_cls.default_config(), comm_defaults, names, allow_unknown_keys)
    except ConfigError as exc:
        raise ConfigError(f'parallel config: system_config: {exc}') from None
    tls = system.get('tls')
    uses_tls = isinstance(tls, Mapping) and any(value is not None for value in tls.values())
    if uses_tls and main.policy.collect.collector.get('policy_transport') == 'http':
        # The weights would cross the network in clear, next to links the user asked to encrypt.
        raise ConfigError(
            "parallel config: policy.collect.collector.policy_transport='http' fetches weights from the learner's "
            "run service without the run's CA: with system_config.tls use 'fs' (the shared directory)"
        )


# ---- writing --------------------------------------------------------------------------------------
def _py(value: Any, indent: int = 0) -> str:
    """Python source for plain config data (dicts one key per line; inf / nan spelled out)."""
    pad = ' ' * (indent + 4)
    if isinstance(value, Mapping):
        if not value:
            return 'dict()'
        items = ''.join(f'{pad}{k!r}: {_py(v, indent + 4)},\n' for k, v in value.items())
        return '{\n' + items + ' ' * indent + '}'
    if isinstance(value, (list, tuple)):
        inner = ', '.join(_py(v, indent + 4) for v in value)
        return f'[{inner}]'
    if isinstance(value, float) and not math.isfinite(value):
        return "float('nan')" if math.isnan(value) else ("float('inf')" if value > 0 else "-float('inf')")
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if hasattr(value, 'tolist'):
        return _py(value.tolist(), indent)
    return repr(repr(value))


def save_parallel_config(cfg: Mapping[str, Any], create_cfg: Mapping[str, Any], path: str) -> str:
    """Write ``main_config``, ``create_config`` and ``system_config`` to ``path`` (atomically, secrets
    redacted: ``ding.config.writer.redact_secrets``); return it."""
    cfg = redact_secrets(cfg)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = (
        '"""Compiled parallel config written by ding.config.compile_config_parallel."""\n\n'
        f'main_config = {_py(cfg["main"])}\n\n'
        f'create_config = {_py(create_cfg)}\n\n'
        f'system_config = {_py(cfg["system"])}\n'
    )
    tmp = f'{path}.{os.getpid()}.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(tmp, path)
    return path
