"""``compile_config``: the user's config merged over every component's defaults, validated, saved.

Component classes (learner, evaluator, env managers, buffers, policies...) are imported lazily, inside
``compile_config``, so that ``import ding.config`` stays cheap.
"""

from __future__ import annotations

import copy
import datetime
import importlib
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from easydict import EasyDict

from ding.utils.registry import REGISTRIES, import_target

from .errors import ConfigError
from .loader import read_config
from .merge import deep_merge_dicts, deep_update, get_path
from .validate import check_env_section, coerce_integers, fill_model_shapes, unknown_keys_allowed, validate_config
from .writer import save_config, save_config_py

_LOG = logging.getLogger('ding.config')

# Keys every compiled config has, whatever the components declare.
ENV_CONFIG_TEMPLATE = dict(manager=dict(), stop_value=int(1e10), n_evaluator_episode=4)
POLICY_CONFIG_TEMPLATE: dict[str, dict[str, Any]] = dict(
    model=dict(),
    learn=dict(learner=dict()),
    collect=dict(collector=dict()),
    eval=dict(evaluator=dict()),
    other=dict(replay_buffer=dict(), commander=dict()),
)


class _Default:
    """Marks a keyword left at its default class (resolved at call time, so imports stay lazy)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_DEFAULT_LEARNER = _Default('BaseLearner')
_DEFAULT_EVALUATOR = _Default('InteractionSerialEvaluator')

# Packages whose import registers the built-in components of each kind.
_BUILTIN_PACKAGES = {
    'env': ('ding.envs',),
    'env_manager': ('ding.envs',),
    'policy': ('ding.policy',),
    'buffer': ('ding.worker.replay_buffer',),
    'serial_collector': ('ding.worker.collector',),
    'serial_evaluator': ('ding.worker.collector',),
    'learner': ('ding.worker.learner',),
    'commander': ('ding.worker.coordinator',),
}
# Where a class with no registry entry can still be found, for the defaults.
_FALLBACK_CLASSES = {
    'learner': ('ding.worker.learner', 'BaseLearner', 'base'),
    'serial_evaluator': ('ding.worker.collector', 'InteractionSerialEvaluator', 'interaction'),
    'commander': ('ding.worker.coordinator', 'BaseSerialCommander', 'base'),
    'env_manager': ('ding.envs', 'BaseEnvManager', 'base'),
}
# Registry kind -> the create_config key that names it.
_CREATE_KEYS = {'serial_collector': 'collector', 'serial_evaluator': 'evaluator', 'buffer': 'replay_buffer'}


def compile_config(
    cfg: Mapping,
    env_manager: Any = None,
    policy: Any = None,
    learner: Any = _DEFAULT_LEARNER,
    collector: Any = None,
    evaluator: Any = _DEFAULT_EVALUATOR,
    buffer: Any = None,
    env: Any = None,
    reward_model: Any = None,
    world_model: Any = None,
    seed: int = 0,
    auto: bool = False,
    create_cfg: Mapping | None = None,
    save_cfg: bool = True,
    save_path: str = 'total_config.py',
    renew_dir: bool = True,
) -> EasyDict:
    """Merge ``cfg`` over the defaults of the components it configures; validate; optionally save.

    With ``auto=True`` the component classes come from ``create_cfg`` through the registries (after
    importing ``create_cfg.<part>.import_names``); otherwise the classes passed in are used (``learner``
    and ``evaluator`` default to ``BaseLearner`` / ``InteractionSerialEvaluator``, ``env_manager`` to
    ``BaseEnvManager``; a ``None`` component contributes no defaults). Each ``default_config()`` is placed
    under the user's values at: env -> ``env``, env manager -> ``env.manager``, policy -> ``policy``,
    learner -> ``policy.learn.learner``, collector -> ``policy.collect.collector``, evaluator ->
    ``policy.eval.evaluator``, buffer -> ``policy.other.replay_buffer``, commander ->
    ``policy.other.commander``, reward / world model -> ``reward_model`` / ``world_model``.

    ``cfg`` is validated against those defaults first (``validate_config``): unknown keys in strict
    sections, wrong types and out-of-range values raise ``ConfigError`` before anything is written.
    ``DING_ALLOW_UNKNOWN_KEYS=1`` in the environment accepts unknown keys everywhere.

    With ``save_cfg`` the result is written to ``./{exp_name}/{save_path}``; when ``renew_dir`` is set
    and ``./{exp_name}`` already exists, ``exp_name`` gets a ``_YYmmdd_HHMMSS`` suffix first (logged).
    """
    user = EasyDict(copy.deepcopy(dict(cfg or {})))
    create = EasyDict(copy.deepcopy(dict(create_cfg))) if create_cfg is not None else None
    if auto:
        if create is None:
            raise ConfigError('compile_config(auto=True) needs create_cfg (the create_config of the config file)')
        env, env_manager, policy, collector, buffer, learner, evaluator, commander = _resolve_from_create(
            create, env, env_manager, policy, collector, buffer, learner, evaluator
        )
    else:
        if env_manager is None:  # DI-engine's behaviour: BaseEnvManager's defaults when none is given
            env_manager = _default_class('env_manager')
        if isinstance(learner, _Default):
            learner = _component_class('learner', 'base', None, where='compile_config(learner=BaseLearner)')
        if isinstance(evaluator, _Default):
            evaluator = _component_class(
                'serial_evaluator', 'interaction', None, where='compile_config(evaluator=InteractionSerialEvaluator)'
            )
        commander = None

    defaults = _build_defaults(
        create, env, env_manager, policy, learner, collector, evaluator, buffer, commander, reward_model, world_model
    )
    validate_config(user, defaults, allow_unknown_keys=unknown_keys_allowed())

    merged = deep_merge_dicts(defaults, user)
    coerce_integers(merged, defaults)
    check_env_section(env, merged.env, unknown_keys_allowed() or user.get('allow_unknown_keys') is True)
    fill_model_shapes(env, merged)
    _finish(merged, user, create, seed, evaluator is not None)

    if save_cfg:
        _prepare_exp_dir(merged, renew_dir)
        save_config_py(merged, os.path.join(merged.exp_name, save_path), create_cfg=create)
    return merged


# ---- resolving component classes -----------------------------------------------------------------
def _resolve_from_create(
    create: EasyDict, env: Any, env_manager: Any, policy: Any, collector: Any, buffer: Any, learner: Any, evaluator: Any
) -> tuple:
    for part, given in (('env', env), ('env_manager', env_manager), ('policy', policy)):
        if part not in create and given is None:
            raise ConfigError(f"create_config has no '{part}' section (need {part}=dict(type=...))")
    if env is None:
        env = _component_class('env', _type_of(create, 'env'), create.env)
    if env_manager is None:
        env_manager = _component_class('env_manager', _type_of(create, 'env_manager'), create.env_manager)
    if policy is None:
        policy = _component_class('policy', _type_of(create, 'policy'), create.policy)
    policy_defaults = _defaults_of(policy)
    if collector is None:
        section = create.get('collector')
        ctype = (section or {}).get('type') or get_path(policy_defaults, 'collect.collector.type') or 'sample'
        create.collector = deep_merge_dicts(section, {'type': ctype})
        collector = _component_class('serial_collector', ctype, section)
    if buffer is None:
        section = create.get('replay_buffer')
        btype = (section or {}).get('type') or get_path(policy_defaults, 'other.replay_buffer.type') or 'naive'
        create.replay_buffer = deep_merge_dicts(section, {'type': btype})
        buffer = _component_class('buffer', btype, section)
    if isinstance(learner, _Default):
        section = create.get('learner')
        learner = _component_class('learner', (section or {}).get('type') or 'base', section)
    if isinstance(evaluator, _Default):
        section = create.get('evaluator')
        evaluator = _component_class('serial_evaluator', (section or {}).get('type') or 'interaction', section)
    section = create.get('commander')
    commander = _component_class('commander', (section or {}).get('type') or 'base', section)
    return env, env_manager, policy, collector, buffer, learner, evaluator, commander


def _type_of(create: Mapping, part: str) -> str:
    section = create.get(part)
    if not isinstance(section, Mapping) or not section.get('type'):
        raise ConfigError(f'create_config.{part}.type is missing (the registered name of the {part} to use)')
    return section['type']


def _component_class(kind: str, type_name: str, section: Mapping | None, where: str | None = None) -> Any:
    """Import ``section.import_names`` and the built-in package of ``kind``; look ``type_name`` up."""
    create_key = f'create_config.{_CREATE_KEYS.get(kind, kind)}'
    where = where or f'{create_key}.type'
    _import_names((section or {}).get('import_names') or [], f'{create_key}.import_names')
    for package in _BUILTIN_PACKAGES.get(kind, ()):
        _import_builtin(package)
    registry = REGISTRIES[kind]
    if type_name in registry:
        return registry[type_name]
    fallback = _FALLBACK_CLASSES.get(kind)
    if fallback is not None and type_name == fallback[2]:
        # The default class may exist without being registered under its usual name.
        module = sys.modules.get(fallback[0])
        cls = getattr(module, fallback[1], None) if module is not None else None
        if cls is not None:
            return cls
    try:
        return registry.get_cls(type_name)
    except KeyError as e:
        raise ConfigError(f'{where}: {e.args[0]}') from None


def _default_class(kind: str) -> Any:
    """The default class of ``kind`` (e.g. BaseEnvManager), or None if it is not available."""
    try:
        return _component_class(kind, _FALLBACK_CLASSES[kind][2], None, where=f'default {kind}')
    except ConfigError:
        return None


def _import_names(names: Iterable[str], where: str) -> None:
    if isinstance(names, str):
        names = [names]
    for name in names:
        try:
            importlib.import_module(import_target(name))
        except ModuleNotFoundError as e:
            if e.name and (name == e.name or name.startswith(e.name + '.')):
                raise ConfigError(f"{where}: cannot import '{name}' ({e})") from e
            raise


def _import_builtin(package: str) -> None:
    """Import a built-in package for its registrations; tolerate only the package itself being absent."""
    try:
        importlib.import_module(package)
    except ModuleNotFoundError as e:
        if not (e.name and (package == e.name or package.startswith(e.name + '.'))):
            raise


def _registered_name(registry: Mapping, cls: Any) -> str | None:
    for name, value in registry.items():
        if value is cls:
            return name
    return None


def _defaults_of(component: Any) -> EasyDict:
    """``component.default_config()``, or an empty dict for components without one (e.g. an env function)."""
    if component is None:
        return EasyDict()
    fn = getattr(component, 'default_config', None)
    if fn is None:
        return EasyDict()
    value = fn()
    if not isinstance(value, Mapping):
        raise ConfigError(f'{component!r}.default_config() must return a dict, got {type(value).__name__}')
    return EasyDict(copy.deepcopy(dict(value)))


# ---- building the defaults tree ------------------------------------------------------------------
def _build_defaults(
    create: EasyDict | None,
    env: Any,
    env_manager: Any,
    policy: Any,
    learner: Any,
    collector: Any,
    evaluator: Any,
    buffer: Any,
    commander: Any,
    reward_model: Any,
    world_model: Any,
) -> EasyDict:
    create = create or EasyDict()
    env_cfg = deep_merge_dicts(ENV_CONFIG_TEMPLATE, _defaults_of(env))
    manager = deep_merge_dicts(_defaults_of(env_manager), env_cfg.get('manager'))
    env_cfg = deep_merge_dicts(env_cfg, create.get('env'))
    env_cfg.manager = deep_merge_dicts(manager, _with_type(create.get('env_manager'), env_manager, 'env_manager'))

    policy_cfg = deep_merge_dicts(POLICY_CONFIG_TEMPLATE, _defaults_of(policy))
    policy_cfg = deep_merge_dicts(policy_cfg, _with_type(create.get('policy'), policy, 'policy'))
    slots = (
        ('learn', 'learner', learner, 'learner', create.get('learner')),
        ('collect', 'collector', collector, 'serial_collector', create.get('collector')),
        ('eval', 'evaluator', evaluator, 'serial_evaluator', create.get('evaluator')),
        ('other', 'replay_buffer', buffer, 'buffer', create.get('replay_buffer')),
        ('other', 'commander', commander, 'commander', create.get('commander')),
    )
    for section, slot, cls, kind, create_section in slots:
        if cls is None:
            continue
        # Component defaults, then what the policy says about this component, then create_config.
        merged = deep_merge_dicts(_defaults_of(cls), policy_cfg[section].get(slot))
        policy_cfg[section][slot] = deep_merge_dicts(merged, _with_type(create_section, cls, kind))

    defaults = EasyDict(env=env_cfg, policy=policy_cfg)
    for name, cls in (('reward_model', reward_model), ('world_model', world_model)):
        section = create.get(name)
        if cls is not None or section:
            defaults[name] = deep_merge_dicts(_defaults_of(cls), section)
    return defaults


def _with_type(create_section: Mapping | None, cls: Any, kind: str) -> EasyDict:
    """The create_config section, with ``type`` filled from the registry when only a class was given."""
    out = deep_merge_dicts(create_section, None)
    if 'type' not in out and cls is not None:
        name = _registered_name(REGISTRIES[kind], cls)
        if name is not None:
            out.type = name
    return out


# ---- after the merge ---------------------------------------------------------------------------
def _finish(cfg: EasyDict, user: Mapping, create: Mapping | None, seed: int, has_evaluator: bool) -> None:
    if create:
        # The types that picked the classes are the ones recorded, whatever the main config says.
        for part, target in (
            ('env', cfg.env),
            ('env_manager', cfg.env.manager),
            ('policy', cfg.policy),
            ('collector', cfg.policy.collect.collector),
            ('replay_buffer', cfg.policy.other.replay_buffer),
        ):
            section = create.get(part)
            if isinstance(section, Mapping):
                for key in ('type', 'import_names'):
                    if key in section:
                        target[key] = copy.deepcopy(section[key])
    if 'unroll_len' in cfg.policy:
        cfg.policy.collect.unroll_len = cfg.policy.unroll_len
    cfg.seed = seed
    if not cfg.get('exp_name'):
        cfg.exp_name = 'default_experiment'
    if has_evaluator:
        evaluator = cfg.policy.eval.evaluator
        for env_key, eval_key in (('stop_value', 'stop_value'), ('n_evaluator_episode', 'n_episode')):
            # The env section is where configs usually say it; an evaluator-only value is kept too.
            if (
                get_path(user, f'env.{env_key}') is None
                and get_path(user, f'policy.eval.evaluator.{eval_key}') is not None
            ):
                cfg.env[env_key] = evaluator[eval_key]
            else:
                evaluator[eval_key] = cfg.env.get(env_key)
    cuda = bool(cfg.policy.get('cuda', False))
    for name in ('reward_model', 'world_model'):
        if isinstance(cfg.get(name), Mapping):
            cfg[name].setdefault('cuda', cuda)
    if cuda:
        import torch  # deferred: compiling a config must not import torch unless it asks for CUDA

        if not torch.cuda.is_available():
            _LOG.warning('policy.cuda=True but no CUDA device is available: the policy will run on the CPU')


def _prepare_exp_dir(cfg: EasyDict, renew_dir: bool) -> None:
    if os.path.exists(cfg.exp_name) and renew_dir:
        old = cfg.exp_name
        base = cfg.exp_name + datetime.datetime.now().strftime('_%y%m%d_%H%M%S')
        name, n = base, 1
        while os.path.exists(name):  # two compiles within one second
            name, n = f'{base}_{n}', n + 1
        cfg.exp_name = name
        _LOG.warning("experiment directory './%s' already exists; this run uses './%s' (renew_dir=True)", old, name)
    os.makedirs(cfg.exp_name, exist_ok=True)


__all__ = [
    'compile_config',
    'read_config',
    'save_config',
    'save_config_py',
    'deep_merge_dicts',
    'deep_update',
    'ConfigError',
    'validate_config',
]
