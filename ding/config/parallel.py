"""Compiling a parallel-mode config: the main config plus the ``system`` section naming every process.

``compile_config_parallel(main, create, system, seed)`` merges the defaults of every component named in
``create_config`` (env, env manager, policy, parallel collector, learner, commander, replay buffer)
under the user's main config, validates it, and fills the system section with ``parallel_transform``
(``ding.config.parallel_system``: every process's host and port, the shared directories).
"""

from __future__ import annotations

import copy
import math
import os
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
from .parallel_system import (
    DATA_PARALLEL,
    DEFAULT_SYSTEM,
    LOCAL_HOST,
    can_bind,
    data_parallel,
    find_free_port,
    parallel_transform,
)
from .system import check_system_config
from .validate import check_env_section, coerce_integers, fill_model_shapes, unknown_keys_allowed, validate_config
from .writer import redact_secrets

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
PARALLEL_COLLECTOR_DEFAULTS = dict(collector_num=1, update_policy_second=3)
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


# ---- main section -------------------------------------------------------------------------------
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


__all__ = [
    'BUILTIN_COMM_MODULES',
    'BUILTIN_COMMANDER_MODULES',
    'BUILTIN_COORDINATOR_MODULES',
    'PARALLEL_COLLECTOR_DEFAULTS',
    'PARALLEL_LEARNER_DEFAULTS',
    'PLATFORMS',
    'check_multi_learner',
    'compile_config_parallel',
    'save_parallel_config',
    # the system section (ding.config.parallel_system)
    'DATA_PARALLEL',
    'DEFAULT_SYSTEM',
    'LOCAL_HOST',
    'can_bind',
    'data_parallel',
    'find_free_port',
    'parallel_transform',
]
