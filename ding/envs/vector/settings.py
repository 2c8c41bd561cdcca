"""The vectorised-env keys of a run's ``env`` section, checked and resolved before any env is built."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ('envpool', 'gymnasium')
WRAPPER_NAMES = ('mask_velocity', 'atari', 'obs_norm')
"""The names ``env.wrappers`` accepts (``ding.envs.vector.wrappers.WRAPPERS`` registers each)."""
VECTORIZATION_MODES = ('async', 'sync')

ATARI_DEFAULTS: dict[str, Any] = dict(
    noop_max=30,
    frame_skip=4,
    stack_num=4,
    img_height=84,
    img_width=84,
    gray_scale=True,
    episodic_life=True,
    reward_clip=True,
    fire_reset=True,
    repeat_action_probability=0.0,
)
"""The standard Atari preprocessing (DI-engine / EnvPool key names; ``fire_reset`` is EnvPool's ``use_fire_reset``:
FIRE pressed after each reset of games that need it to start); ``episodic_life`` and ``reward_clip``
apply to training only: evaluation envs always see whole games and true rewards."""

EVAL_OFF = ('episodic_life', 'reward_clip')

_NO_FRAMESKIP_ID = re.compile(r'(?P<game>\w+)NoFrameskip-v4')
_ALE_ID = re.compile(r'ALE/(?P<game>\w+)-v5')


@dataclass(frozen=True)
class WrapperSpec:
    """One entry of ``env.wrappers``: a registered name and its options."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorEnvSettings:
    """What ``make_vector_env`` needs from the ``env`` section (see docs/envs.md for each key)."""

    env_id: str
    backend: str | None
    wrappers: tuple[WrapperSpec, ...]
    max_episode_steps: int | None
    envpool_kwargs: dict[str, Any]
    make_kwargs: dict[str, Any]
    vectorization_mode: str
    context: str | None
    atari: dict[str, Any]
    """Atari preprocessing settings (ATARI_DEFAULTS overridden by the section); used only for Atari ids."""


def is_atari_id(env_id: str) -> bool:
    """An ALE game id (``ALE/Pong-v5`` or ``PongNoFrameskip-v4``)."""
    return bool(_ALE_ID.fullmatch(env_id) or _NO_FRAMESKIP_ID.fullmatch(env_id))


def envpool_task_id(env_id: str) -> str:
    """EnvPool's name for a gymnasium id: its Atari games are ``Pong-v5``; other ids are shared."""
    match = _ALE_ID.fullmatch(env_id) or _NO_FRAMESKIP_ID.fullmatch(env_id)
    return f'{match.group("game")}-v5' if match else env_id


def _get(cfg: Mapping[str, Any], key: str, default: Any) -> Any:
    value = cfg.get(key, default)
    return default if value is None else value


def _wrapper_specs(raw: Any) -> tuple[WrapperSpec, ...]:
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f'env.wrappers must be a list of names or dict(name=..., **options), got {raw!r}')
    specs = []
    for i, entry in enumerate(raw):
        if isinstance(entry, str):
            specs.append(WrapperSpec(entry))
        elif isinstance(entry, Mapping) and isinstance(entry.get('name'), str):
            options = {k: v for k, v in entry.items() if k != 'name'}
            specs.append(WrapperSpec(entry['name'], options))
        else:
            raise ValueError(f'env.wrappers[{i}] must be a name or dict(name=..., **options), got {entry!r}')
        if specs[-1].name not in WRAPPER_NAMES:
            raise ValueError(f'env.wrappers: unknown wrapper {specs[-1].name!r}; registered: {list(WRAPPER_NAMES)}')
    return tuple(specs)


def _mapping(cfg: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = _get(cfg, key, {})
    if not isinstance(value, Mapping):
        raise ValueError(f'env.{key} must be a dict, got {value!r}')
    return dict(value)


def read_settings(env_cfg: Mapping[str, Any], for_eval: bool) -> VectorEnvSettings:
    """Check the section's vector-env keys and resolve the Atari settings (``for_eval`` turns off
    ``EVAL_OFF``). Raises ``ValueError`` naming the key. Builds nothing (a pipeline checks its config with it
    before any work); what needs the env itself (its spaces, EnvPool's support) ``make_vector_env`` checks."""
    env_id = env_cfg.get('env_id')
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env.env_id must name a gymnasium env id (e.g. 'CartPole-v1'), got {env_id!r}")
    backend = env_cfg.get('backend')
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f'env.backend must be one of {BACKENDS} or None (automatic), got {backend!r}')
    max_steps = env_cfg.get('max_episode_steps')
    if max_steps is not None and (not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1):
        raise ValueError(f'env.max_episode_steps must be a positive int or None, got {max_steps!r}')
    mode = _get(env_cfg, 'vectorization_mode', 'async')
    if mode not in VECTORIZATION_MODES:
        raise ValueError(f'env.vectorization_mode must be one of {VECTORIZATION_MODES}, got {mode!r}')
    context = env_cfg.get('context')
    if context is not None and not isinstance(context, str):
        raise ValueError(f"env.context must be a multiprocessing start method ('fork', 'spawn', ...), got {context!r}")
    atari = {key: _get(env_cfg, key, default) for key, default in ATARI_DEFAULTS.items()}
    if for_eval:
        atari.update(dict.fromkeys(EVAL_OFF, False))
    return VectorEnvSettings(
        env_id=env_id,
        backend=backend,
        wrappers=_wrapper_specs(_get(env_cfg, 'wrappers', [])),
        max_episode_steps=max_steps,
        envpool_kwargs=_mapping(env_cfg, 'envpool_kwargs'),
        make_kwargs=_mapping(env_cfg, 'make_kwargs'),
        vectorization_mode=mode,
        context=context,
        atari=atari,
    )
