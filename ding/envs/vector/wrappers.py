"""Named observation / reward wrappers of the vector envs (``env.wrappers``) and the standard Atari preprocessing.

Each registered wrapper wraps one gymnasium env inside its worker; ``mask_velocity`` also works on an EnvPool
batch (``observation_keep`` gives the kept entries, the EnvPool backend selects them from the batch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    NormalizeObservation,
    TimeLimit,
    TransformObservation,
)

from .settings import VectorEnvSettings, WrapperSpec, read_settings

# The observation entries mask_velocity keeps, per env family (position-like entries; velocities dropped).
VELOCITY_FREE_ENTRIES: dict[str, tuple[int, ...]] = {
    'CartPole': (0, 2),  # cart position x and pole angle theta, without x_dot and theta_dot
}


def observation_keep(env_id: str, options: Mapping[str, Any]) -> tuple[int, ...]:
    """The entries of a flat observation ``mask_velocity`` keeps: ``options['keep']`` or the family's default."""
    if 'keep' in options:
        keep = options['keep']
        if not isinstance(keep, (list, tuple)) or not keep or not all(isinstance(i, int) for i in keep):
            raise ValueError(f"env.wrappers: mask_velocity's keep must be a non-empty list of ints, got {keep!r}")
        return tuple(keep)
    unknown = set(options) - {'keep'}
    if unknown:
        raise ValueError(f'env.wrappers: mask_velocity takes only the option keep, got {sorted(unknown)}')
    family = env_id.split('-')[0]
    if family not in VELOCITY_FREE_ENTRIES:
        raise ValueError(
            f'env.wrappers: mask_velocity knows the velocity entries of {sorted(VELOCITY_FREE_ENTRIES)} only; '
            f"for {env_id!r} give dict(name='mask_velocity', keep=[...]) with the entries to keep"
        )
    return VELOCITY_FREE_ENTRIES[family]


def _mask_velocity(env: gymnasium.Env, spec: WrapperSpec, settings: VectorEnvSettings) -> gymnasium.Env:
    space = env.observation_space
    keep = list(observation_keep(settings.env_id, spec.options))
    if not isinstance(space, spaces.Box) or len(space.shape) != 1 or max(keep) >= space.shape[0]:
        raise ValueError(f'env.wrappers: mask_velocity needs a flat Box observation with entries {keep}, got {space}')
    kept = spaces.Box(low=space.low[keep], high=space.high[keep], dtype=space.dtype)
    return TransformObservation(env, itemgetter(keep), kept)


class EpisodicLife(gymnasium.Wrapper):
    """A lost life ends the episode for the learner (``terminated``), but the game goes on: the next ``reset``
    only steps a no-op unless the game itself is over (so the vector env's autoreset keeps the game)."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = int(info.get('lives', 0))
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)  # NOOP: continue the game after the lost life
            if terminated or truncated:
                obs, info = self.env.reset(seed=seed, options=options)
        self.game_over = False
        self.lives = int(info.get('lives', 0))
        return obs, info


class FireReset(gymnasium.Wrapper):
    """Press FIRE after every reset (games such as Breakout wait for it to serve); a game that ends on that
    press is reset again."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        if not needs_fire(env):
            raise ValueError(f'FireReset: {env.spec.id if env.spec else env} has no FIRE action')

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self.env.reset(seed=seed, options=options)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            obs, info = self.env.reset(options=options)
        return obs, info


def needs_fire(env: gymnasium.Env) -> bool:
    """The game has a FIRE action (action 1, as ALE lays out the minimal action sets)."""
    meanings: list[str] = getattr(env.unwrapped, 'get_action_meanings', list)()  # ALE envs have it
    return len(meanings) > 1 and meanings[1] == 'FIRE'


def _sign(reward: SupportsFloat) -> float:
    return float(np.sign(float(reward)))


def _atari(env: gymnasium.Env, spec: WrapperSpec, settings: VectorEnvSettings) -> gymnasium.Env:
    """Noop reset, frame skip with max-pool, resize (grey), episodic life, reward clip, frame stack, time limit
    in agent steps; the settings' ``atari`` dict says which."""
    if spec.options:
        raise ValueError(f'env.wrappers: atari takes its settings from env keys, not options {sorted(spec.options)}')
    atari = settings.atari
    env = AtariPreprocessing(
        env,
        noop_max=atari['noop_max'],
        frame_skip=atari['frame_skip'],
        screen_size=(atari['img_width'], atari['img_height']),
        grayscale_obs=atari['gray_scale'],
    )
    if atari['episodic_life']:
        env = EpisodicLife(env)
    if atari['fire_reset'] and needs_fire(env):
        env = FireReset(env)
    if atari['reward_clip']:
        env = gymnasium.wrappers.TransformReward(env, _sign)
    if atari['stack_num'] > 1:
        env = FrameStackObservation(env, atari['stack_num'])
    if settings.max_episode_steps is not None:
        env = TimeLimit(env, settings.max_episode_steps)
    return env


def _clip_float32(obs: np.ndarray, bound: float) -> np.ndarray:
    return np.clip(obs, -bound, bound).astype(np.float32)


OBS_NORM_OPTIONS = dict(clip=10.0, epsilon=1e-8)


def _obs_norm(env: gymnasium.Env, spec: WrapperSpec, settings: VectorEnvSettings) -> gymnasium.Env:
    """Each observation entry shifted and scaled by its running mean and std (gymnasium's
    ``NormalizeObservation``, updated on every step of this env), then clipped to ``[-clip, clip]``."""
    unknown = set(spec.options) - set(OBS_NORM_OPTIONS)
    if unknown:
        raise ValueError(f'env.wrappers: obs_norm takes the options {sorted(OBS_NORM_OPTIONS)}, got {sorted(unknown)}')
    options = {**OBS_NORM_OPTIONS, **spec.options}
    clip, epsilon = options['clip'], options['epsilon']
    if not isinstance(clip, (int, float)) or isinstance(clip, bool) or not clip > 0:
        raise ValueError(f"env.wrappers: obs_norm's clip must be a positive number, got {clip!r}")
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or not epsilon > 0:
        raise ValueError(f"env.wrappers: obs_norm's epsilon must be a positive number, got {epsilon!r}")
    if not isinstance(env.observation_space, spaces.Box):
        raise ValueError(f'env.wrappers: obs_norm needs a Box observation space, got {env.observation_space}')
    env = NormalizeObservation(env, epsilon=float(epsilon))
    bound = float(clip)
    clipped = spaces.Box(-bound, bound, shape=env.observation_space.shape, dtype=np.float32)
    return TransformObservation(env, functools.partial(_clip_float32, bound=bound), clipped)


WrapperFn = Callable[[gymnasium.Env, WrapperSpec, VectorEnvSettings], gymnasium.Env]

WRAPPERS: dict[str, WrapperFn] = {
    'mask_velocity': _mask_velocity,
    'atari': _atari,
    'obs_norm': _obs_norm,
}
"""What each name of ``settings.WRAPPER_NAMES`` does (the gymnasium backend applies ``atari`` to Atari ids itself)."""

ENVPOOL_WRAPPERS = ('mask_velocity', 'atari')
"""The names the EnvPool backend accepts: ``atari`` is EnvPool's own preprocessing, ``mask_velocity`` a batch
selection."""


def check_wrapper_names(specs: tuple[WrapperSpec, ...], allowed: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming ``env.wrappers`` for a name the backend does not take (``allowed``)."""
    for spec in specs:
        if spec.name not in allowed:
            raise ValueError(
                f"env.wrappers: {spec.name!r} works with backend='gymnasium' only (EnvPool: {list(allowed)})"
            )


def apply_wrappers(env: gymnasium.Env, settings: VectorEnvSettings, specs: tuple[WrapperSpec, ...]) -> gymnasium.Env:
    """Wrap ``env`` with ``specs`` in order."""
    for spec in specs:
        env = WRAPPERS[spec.name](env, spec, settings)
    return env


def wrap_from_config(env: gymnasium.Env, env_cfg: Mapping[str, Any], for_eval: bool) -> gymnasium.Env:
    """``env`` wrapped with the config's ``wrappers`` list (a single env of the serial pipeline; the names and
    options are those of the vector envs)."""
    settings = read_settings(env_cfg, for_eval)
    return apply_wrappers(env, settings, settings.wrappers)
