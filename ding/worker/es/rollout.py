"""``ESRollout``: a worker's side of evolution strategies: score antithetic perturbations of the learner's model.

A remote worker (``ding es-worker``) has no config file: ``ESRollout.from_spec`` builds everything from the dict
``ESPolicy.worker_spec()`` produced on the learner and checks every field first, since it came over the network.
Env and model modules named by a spec are imported only from ``ding.*`` / ``dizoo.*``, and gymnasium ids with
``':'`` are refused (gymnasium would import the module before the colon).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np
import torch

from ding.envs.env.base_env import BaseEnv
from ding.envs.env.ding_env_wrapper import DingEnvWrapper
from ding.policy.es import WORKER_SPEC_VERSION, greedy_action, write_flat_parameters
from ding.rl_utils.es import NoiseTable
from ding.torch_utils.numpy_chain import NumpyChain
from ding.utils.registry import ENV_REGISTRY, MODEL_REGISTRY, import_module

from .noise import noise_table_from_spec

SPEC_KEYS = ('spec_version', 'env', 'model', 'dim', 'noise_table', 'sigma', 'antithetic', 'max_episode_steps')
GYMNASIUM_ENV_KEYS = ('env_id', 'act_scale', 'max_episode_steps')
MAX_EPISODE_STEPS = 1_000_000
MAX_SPEC_STRING = 256
ALLOWED_MODULE = re.compile(r'(ding|dizoo)(\.[A-Za-z_][A-Za-z0-9_]*)+')
GYMNASIUM_ID = re.compile(r'[A-Za-z0-9_\-/.]+')
_SCALAR = (bool, int, float, str, type(None))


class ESRollout:
    """Scores perturbations ``theta +- sigma * eps`` of one model on one env, one episode each.

    ``set_parameters(flat, version)`` installs the learner's parameters; ``next_noise_id()`` draws a
    perturbation; ``evaluate(noise_id)`` returns ``(return_pos, return_neg, env_steps)``. Both episodes of a pair
    start from the same env seed (common random numbers: the difference of the two returns then measures the
    perturbation, not the start state). Without antithetic sampling only ``theta + sigma * eps`` is played and
    ``return_neg`` is 0.0.
    """

    def __init__(
        self,
        env: BaseEnv,
        model: torch.nn.Module,
        noise: NoiseTable,
        sigma: float,
        antithetic: bool = True,
        max_episode_steps: int | None = None,
        seed: int = 0,
    ) -> None:
        self._env, self._model, self._noise = env, model, noise
        self._model.requires_grad_(False)
        self._model.eval()
        self._dim = sum(p.numel() for p in model.parameters())
        noise.max_noise_id(self._dim)  # raises when the model does not fit the table
        self._sigma, self._antithetic = float(sigma), bool(antithetic)
        self._max_steps = max_episode_steps if max_episode_steps is not None else MAX_EPISODE_STEPS
        self._rng = np.random.default_rng(seed)
        self._theta: np.ndarray | None = None
        self._version = -1
        self._scratch = np.empty(self._dim, dtype=np.float32)  # theta +- sigma * eps, reused by every episode
        self._numpy_actor: NumpyChain | None = None
        self._actor_checked = False  # whether the numpy actor was tried (at the first observation)

    @classmethod
    def from_spec(cls, spec: Any, seed: int) -> ESRollout:
        """A rollout built from ``ESPolicy.worker_spec()``; a ValueError names the first bad field."""
        if not isinstance(spec, Mapping):
            raise ValueError(f'ES worker spec: expected a dict, got {type(spec).__name__}')
        unknown = sorted(set(spec) - set(SPEC_KEYS))
        missing = [k for k in SPEC_KEYS if k not in spec]
        if unknown or missing:
            raise ValueError(f'ES worker spec: unknown keys {unknown}, missing keys {missing}')
        if spec['spec_version'] != WORKER_SPEC_VERSION:
            raise ValueError(
                f'ES worker spec.spec_version: {spec["spec_version"]!r}, this worker reads {WORKER_SPEC_VERSION}'
            )
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f'ESRollout.from_spec: seed must be an int >= 0, got {seed!r}')
        sigma = spec['sigma']
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not (math.isfinite(sigma) and sigma > 0):
            raise ValueError(f'ES worker spec.sigma: expected a positive number, got {sigma!r}')
        if not isinstance(spec['antithetic'], bool):
            raise ValueError(f'ES worker spec.antithetic: expected a bool, got {spec["antithetic"]!r}')
        max_steps = spec['max_episode_steps']
        if max_steps is not None and not _int_in(max_steps, 1, MAX_EPISODE_STEPS):
            raise ValueError(f'ES worker spec.max_episode_steps: expected None or an int in [1, {MAX_EPISODE_STEPS}]')
        dim = spec['dim']
        if not _int_in(dim, 1, 1 << 30):
            raise ValueError(f'ES worker spec.dim: expected a positive int, got {dim!r}')
        noise = noise_table_from_spec(spec['noise_table'], 'ES worker spec.noise_table')
        if dim > noise.size:
            raise ValueError(f'ES worker spec.dim: {dim} parameters do not fit a noise table of {noise.size}')
        model = build_model_from_spec(spec['model'])
        model_dim = sum(p.numel() for p in model.parameters())
        if model_dim != dim:
            raise ValueError(
                f'ES worker spec.dim: {dim}, but the model built from spec.model has {model_dim} parameters'
            )
        env = build_env_from_spec(spec['env'])
        return cls(env, model, noise, float(sigma), spec['antithetic'], max_steps, seed)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def version(self) -> int:
        """Version of the installed parameters (-1 before the first ``set_parameters``)."""
        return self._version

    def set_parameters(self, flat: Any, version: int) -> None:
        """Install the learner's parameters (``dim`` finite floats) of model ``version``."""
        theta = np.asarray(flat, dtype=np.float32)
        if theta.shape != (self._dim,):
            raise ValueError(f'ESRollout.set_parameters: expected {self._dim} values, got shape {theta.shape}')
        if not np.isfinite(theta).all():
            raise ValueError('ESRollout.set_parameters: the parameters hold NaN or infinity')
        if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 0:
            raise ValueError(f'ESRollout.set_parameters: version must be an int >= 0, got {version!r}')
        self._theta = theta.copy() if theta is flat else theta
        self._version = int(version)

    def next_noise_id(self) -> int:
        return self._noise.sample_id(self._rng, self._dim)

    def evaluate(self, noise_id: int) -> tuple[float, float, int]:
        """``(return at theta + sigma * eps, return at theta - sigma * eps or 0.0, env steps taken)``."""
        if self._theta is None:
            raise RuntimeError('ESRollout.evaluate: no parameters yet (call set_parameters first)')
        eps = self._noise.get(int(noise_id), self._dim)
        episode_seed = int(self._rng.integers(0, 2**31 - 1))
        np.multiply(eps, self._sigma, out=self._scratch)
        self._scratch += self._theta
        return_pos, steps = self._episode(episode_seed)
        if not self._antithetic:
            return return_pos, 0.0, steps
        np.multiply(eps, -self._sigma, out=self._scratch)
        self._scratch += self._theta
        return_neg, steps_neg = self._episode(episode_seed)
        return return_pos, return_neg, steps + steps_neg

    def evaluate_unperturbed(self, episode_seed: int | None = None) -> tuple[float, int]:
        """The return and length of one episode of ``theta`` itself."""
        if self._theta is None:
            raise RuntimeError('ESRollout.evaluate_unperturbed: no parameters yet (call set_parameters first)')
        self._scratch[:] = self._theta
        if episode_seed is None:
            episode_seed = int(self._rng.integers(0, 2**31 - 1))
        return self._episode(episode_seed)

    def close(self) -> None:
        self._env.close()

    def _episode(self, episode_seed: int) -> tuple[float, int]:
        """One episode with the parameters in ``self._scratch``."""
        write_flat_parameters(self._model, torch.from_numpy(self._scratch))
        self._env.seed(episode_seed, dynamic_seed=False)
        obs = self._env.reset()
        if not self._actor_checked:
            self._actor_checked = True
            first = np.asarray(obs)
            if first.ndim == 1 and np.issubdtype(first.dtype, np.floating):
                examples = np.random.default_rng(0).normal(size=(8, first.size)).astype(np.float32)
                self._numpy_actor = NumpyChain.trace(GreedyActor(self._model), torch.from_numpy(examples))
        fast = self._numpy_actor
        total, steps = 0.0, 0
        with torch.no_grad():
            while steps < self._max_steps:
                if fast is not None:
                    out = fast(np.asarray(obs, dtype=np.float32))
                    action = int(out) if fast.ends_in_argmax else out
                else:
                    obs_t = torch.from_numpy(np.asarray(obs, dtype=np.float32)).unsqueeze(0)
                    out = greedy_action(self._model, obs_t)[0]
                    action = int(out) if out.dtype == torch.int64 else out.numpy()
                timestep = self._env.step(action)
                reward = timestep.reward
                total += float(reward.item() if hasattr(reward, 'item') else reward)
                steps += 1
                if timestep.done:
                    break
                obs = timestep.obs
        return total, steps


class GreedyActor(torch.nn.Module):
    """``greedy_action`` of a model as a module, for ``torch.fx`` to trace into a ``NumpyChain`` (several times
    cheaper than torch's per-call cost on one observation)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return greedy_action(self.model, obs)


def build_env_from_spec(env_spec: Any) -> BaseEnv:
    """A ding env (``{'type', 'import_names', **cfg}``) or a gymnasium id (``{'env_id', 'act_scale', ...}``)."""
    where = 'ES worker spec.env'
    if not isinstance(env_spec, Mapping):
        raise ValueError(f'{where}: expected a dict, got {type(env_spec).__name__}')
    cfg = dict(env_spec)
    _check_plain_values(cfg, where)
    if 'type' in cfg:
        env_type = cfg.pop('type')
        import_module(_checked_modules(cfg.pop('import_names', []), f'{where}.import_names'))
        try:
            env_cls = ENV_REGISTRY.get_cls(env_type)
        except KeyError as e:
            raise ValueError(f'{where}.type: {e}') from None
        return env_cls(cfg)
    unknown = sorted(set(cfg) - set(GYMNASIUM_ENV_KEYS))
    if unknown:
        raise ValueError(f'{where}: unknown keys {unknown} for a gymnasium env (known: {list(GYMNASIUM_ENV_KEYS)})')
    env_id = cfg.get('env_id')
    if not isinstance(env_id, str) or ':' in env_id or not GYMNASIUM_ID.fullmatch(env_id):
        raise ValueError(f"{where}.env_id: expected a registered gymnasium id without ':', got {env_id!r}")
    if env_id not in gymnasium.registry:
        raise ValueError(f'{where}.env_id: {env_id!r} is not a registered gymnasium id')
    return DingEnvWrapper(cfg=cfg)


def build_model_from_spec(model_spec: Any) -> torch.nn.Module:
    """``MODEL_REGISTRY.build(type, **kwargs)`` after importing the spec's (ding / dizoo) modules."""
    where = 'ES worker spec.model'
    if not isinstance(model_spec, Mapping) or set(model_spec) != {'type', 'import_names', 'kwargs'}:
        raise ValueError(f"{where}: expected a dict with keys ['type', 'import_names', 'kwargs']")
    kwargs = model_spec['kwargs']
    if not isinstance(kwargs, Mapping):
        raise ValueError(f'{where}.kwargs: expected a dict, got {type(kwargs).__name__}')
    _check_plain_values(kwargs, f'{where}.kwargs')
    import_module(_checked_modules(model_spec['import_names'], f'{where}.import_names'))
    try:
        model_cls = MODEL_REGISTRY.get_cls(model_spec['type'])
    except KeyError as e:
        raise ValueError(f'{where}.type: {e}') from None
    try:
        return model_cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f'{where}.kwargs: the model refused them: {e}') from e


def _checked_modules(names: Any, where: str) -> list[str]:
    if not isinstance(names, list) or not all(isinstance(n, str) and ALLOWED_MODULE.fullmatch(n) for n in names):
        raise ValueError(f'{where}: expected a list of ding.* / dizoo.* module names, got {names!r}')
    return names


def _check_plain_values(values: Mapping, where: str) -> None:
    """Keys are strings; values are JSON scalars (strings bounded) or flat lists of them."""
    for key, value in values.items():
        if not isinstance(key, str):
            raise ValueError(f'{where}: key {key!r} is not a string')
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, _SCALAR) or (isinstance(item, str) and len(item) > MAX_SPEC_STRING):
                raise ValueError(f'{where}.{key}: expected JSON scalars or a flat list of them, got {value!r}')
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError(f'{where}.{key}: expected finite numbers, got {value!r}')


def _int_in(value: Any, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high
