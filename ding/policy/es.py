"""OpenAI-style evolution strategies: the learner side (parameters, partials, the Adam step) of ``ding -m es``.

Workers (``ding.worker.es.rollout.ESRollout``) evaluate the current parameters ``theta`` perturbed by
``+-sigma * eps``, where ``eps`` is a slice of a noise table every process rebuilds from ``(seed, size)``; they
send back ``(noise_id, return_pos, return_neg, model_version)``. This module turns those into ``ESPartial``
records (``make_partial``, which applies the staleness rule) and a batch of them into one update.
"""

from __future__ import annotations

import copy
import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ding.rl_utils.es import AdamState, NoiseTable, centred_ranks, es_gradient
from ding.utils.registry import POLICY_REGISTRY

from .base_policy import Policy
from .common_utils import stack_obs

WORKER_SPEC_VERSION = 1
DEFAULT_MODEL = ('vac', ['ding.model.template.vac'])


@dataclass(frozen=True, slots=True)
class ESPartial:
    """One worker result accepted for the current model: the perturbation ``noise_id`` scored
    ``return_pos`` at ``theta + sigma * eps`` and ``return_neg`` at ``theta - sigma * eps`` (``return_neg`` is
    unused without antithetic sampling) on the parameters of ``model_version``."""

    noise_id: int
    return_pos: float
    return_neg: float
    model_version: int


def greedy_action(model: torch.nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """The deterministic action of ``model`` for a batch ``obs``: argmax of the logits, or the Gaussian mean.

    Works for actor models with a ``'compute_actor'`` mode (``vac``) and for plain ``forward(obs)`` models whose
    output holds ``'logit'`` (``dqn``)."""
    modes = getattr(model, 'mode', ())
    out = model(obs, 'compute_actor') if 'compute_actor' in modes else model(obs)
    logit = out['logit']
    if isinstance(logit, dict):
        return logit['mu']
    return logit.argmax(dim=-1)


def actor_output_layer(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The layer giving the logits or the Gaussian mean: ``actor_head.mu`` or the last ``Linear`` of
    ``actor_head`` (``vac``) / ``head`` (``dqn``); None for other models."""
    head = getattr(model, 'actor_head', None) or getattr(model, 'head', None)
    if not isinstance(head, torch.nn.Module):
        return None
    mu = getattr(head, 'mu', None)
    if isinstance(mu, torch.nn.Linear):
        return mu
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    return linears[-1] if linears else None


def shrink_actor_output(model: torch.nn.Module, std: float) -> None:
    """Re-draw the actor's output weights from N(0, std) and zero its bias (nothing for other models)."""
    layer = actor_output_layer(model)
    if layer is None:
        return
    with torch.no_grad():
        layer.weight.normal_(0.0, std)
        if layer.bias is not None:
            layer.bias.zero_()


def flat_parameters_of(model: torch.nn.Module) -> torch.Tensor:
    """A float32 copy of ``model``'s parameters as one vector (``parameters()`` order)."""
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().float().clone()


def write_flat_parameters(model: torch.nn.Module, flat: torch.Tensor) -> None:
    """Copy a vector made by ``flat_parameters_of`` back into ``model``'s parameters (no aliasing)."""
    offset = 0
    with torch.no_grad():
        for param in model.parameters():
            n = param.numel()
            param.copy_(flat[offset : offset + n].view_as(param))
            offset += n
    if offset != flat.numel():
        raise ValueError(f'flat parameters: {flat.numel()} values for a model of {offset} parameters')


@POLICY_REGISTRY.register('es')
class ESPolicy(Policy):
    """Evolution strategies (Salimans et al. 2017) on a small actor network.

    One update from ``n`` partials: the ``N`` returns (``2n`` with ``learn.antithetic``, else ``n``) are shaped
    into weights (``learn.rank_shaping``: centred ranks over the whole batch, ties sharing their rank; else the
    raw returns minus their mean); each partial weighs ``w_pos - w_neg`` (antithetic) or ``w``; the ascent
    direction is ``g = sum_i w_i eps_i / (N * sigma)``. Adam (``learn.learning_rate``, ``betas``, ``eps``) then
    descends ``-g + weight_decay * theta`` (L2 toward 0), and ``version`` goes up by one.

    Staleness rule: a worker's result for ``model_version`` is used while ``version - model_version <=
    learn.max_partial_lag``, as a perturbation of the *current* parameters (the model moved little in so few
    updates); older results are dropped: ``make_partial`` returns None, and ``update`` drops partials that have
    become too old while they waited in the buffer. So a batch only ever holds results relevant to the model.

    The actor's output layer starts near zero (``learn.actor_output_init_std``): perturbations of a policy that
    already prefers one action everywhere rarely change an episode, and ES gets no signal from tied returns.

    Thread safety: ``update`` may run in a background thread while ``make_partial``, ``flat_parameters``,
    ``version`` and the eval mode are used in another; one lock guards the parameters and the version, and the
    heavy part of an update (gathering the noise rows) runs outside it.
    """

    config = dict(
        type='es',
        cuda=False,
        on_policy=True,
        priority=False,
        priority_IS_weight=False,
        model=dict(),
        # the shared noise table: every worker rebuilds it from (seed, size); size must exceed the parameter count
        noise_table=dict(seed=0, size=1 << 22),
        learn=dict(
            population_size=40,  # partials (antithetic pairs) per update
            sigma=0.05,
            antithetic=True,
            rank_shaping=True,
            learning_rate=0.03,
            betas=(0.9, 0.999),
            eps=1e-8,
            weight_decay=0.005,
            max_partial_lag=2,
            # std of the actor's output layer at the start (bias 0): near-equal logits / a near-zero mean, so the
            # first perturbations change behaviour; None keeps the model's own initialisation
            actor_output_init_std=0.01,
        ),
        collect=dict(
            # env of the rollouts: a ding env ({'type': registered name, 'import_names': [...], + its config
            # keys}) or a gymnasium id ({'env_id': 'CartPole-v1', 'act_scale': False})
            env=dict(),
            max_episode_steps=None,  # rollout cap on top of the env's own limit; None: the env's limit only
        ),
        eval=dict(),
        other=dict(),
    )

    def __init__(self, cfg: dict, model: torch.nn.Module | None = None, enable_field: list[str] | None = None) -> None:
        self._model_given = model is not None
        super().__init__(cfg, model, enable_field)
        if self._cuda or self._cfg.get('cuda', False):
            raise ValueError('policy.cuda: ESPolicy runs on the CPU (set cuda=False)')
        lcfg = self._cfg.learn
        self._population_size = _positive_int(lcfg.population_size, 'policy.learn.population_size')
        self._sigma = _positive_float(lcfg.sigma, 'policy.learn.sigma')
        self._antithetic = bool(lcfg.antithetic)
        self._rank_shaping = bool(lcfg.rank_shaping)
        self._max_partial_lag = _non_negative_int(lcfg.max_partial_lag, 'policy.learn.max_partial_lag')
        weight_decay = float(lcfg.weight_decay)
        if not weight_decay >= 0:
            raise ValueError(f'policy.learn.weight_decay: expected >= 0, got {lcfg.weight_decay!r}')
        self._model.requires_grad_(False)  # ES never backpropagates; the Adam step works on one flat vector
        init_std = lcfg.get('actor_output_init_std')
        if init_std is not None and not self._model_given:  # a model given as an object keeps its weights
            # With the default init one action can dominate every observation; perturbations of size sigma
            # then rarely change an episode, all returns tie and ES has no direction (seen on CartPole).
            shrink_actor_output(self._model, _positive_float(init_std, 'policy.learn.actor_output_init_std'))
        self._model.eval()
        self._dim = sum(p.numel() for p in self._model.parameters())
        noise_cfg = self._cfg.noise_table
        self._noise = NoiseTable(int(noise_cfg.seed), int(noise_cfg.size))
        self._noise.max_noise_id(self._dim)  # raises when the model does not fit the table
        self._theta = flat_parameters_of(self._model).numpy()
        self._adam = AdamState(
            self._dim,
            _positive_float(lcfg.learning_rate, 'policy.learn.learning_rate'),
            tuple(lcfg.betas),
            float(lcfg.eps),
            weight_decay,
        )
        self._version = 0
        self._lock = threading.Lock()  # parameters (model, theta, optimizer) and version
        self._update_lock = threading.Lock()  # one update at a time

    def default_model(self) -> tuple[str, list[str]]:
        return DEFAULT_MODEL[0], list(DEFAULT_MODEL[1])

    # ---- the interface of the ES server ------------------------------------------------------------------
    @property
    def version(self) -> int:
        """Number of updates applied (0 for the initial parameters)."""
        with self._lock:
            return self._version

    @property
    def dim(self) -> int:
        """Number of parameters (the length of a noise slice and of ``flat_parameters()``)."""
        return self._dim

    @property
    def population_size(self) -> int:
        """Partials per update (the ES server's buffer size)."""
        return self._population_size

    @property
    def noise_table(self) -> NoiseTable:
        return self._noise

    def flat_parameters(self) -> np.ndarray:
        """A float32 copy of the current parameters (what a model download sends)."""
        with self._lock:
            return self._theta.copy()

    def flat_parameters_with_version(self) -> tuple[np.ndarray, int]:
        """The parameters and the version they belong to, read together."""
        with self._lock:
            return self._theta.copy(), self._version

    def make_partial(self, noise_id: int, return_pos: float, return_neg: float, model_version: int) -> ESPartial | None:
        """An ``ESPartial`` for a worker's result, or None when it is too old (the staleness rule).

        Raises ValueError for a result no honest worker sends: ``noise_id`` outside the table, a non-finite
        return, or a ``model_version`` newer than the current one or negative.
        """
        if isinstance(noise_id, bool) or not isinstance(noise_id, (int, np.integer)):
            raise ValueError(f'ES partial: noise_id must be an int, got {noise_id!r}')
        if not 0 <= noise_id <= self._noise.max_noise_id(self._dim):
            raise ValueError(f'ES partial: noise_id {noise_id} outside [0, {self._noise.max_noise_id(self._dim)}]')
        pos, neg = float(return_pos), float(return_neg)
        if not (math.isfinite(pos) and math.isfinite(neg)):
            raise ValueError(f'ES partial: returns must be finite, got {return_pos!r}, {return_neg!r}')
        if isinstance(model_version, bool) or not isinstance(model_version, (int, np.integer)):
            raise ValueError(f'ES partial: model_version must be an int, got {model_version!r}')
        current = self.version
        if not 0 <= model_version <= current:
            raise ValueError(f'ES partial: model_version {model_version} outside [0, {current}] (the current one)')
        if current - model_version > self._max_partial_lag:
            return None
        return ESPartial(int(noise_id), pos, neg, int(model_version))

    def update(self, partials: Sequence[ESPartial]) -> dict[str, float]:
        """One ES step from a batch of partials; returns scalars to log.

        Partials older than ``max_partial_lag`` by now are dropped (``stale_partials``); with none left the
        parameters and version stay as they are (``used_partials`` 0).
        """
        with self._update_lock:
            version = self.version
            fresh = [p for p in partials if version - p.model_version <= self._max_partial_lag]
            stats = {'stale_partials': float(len(partials) - len(fresh)), 'used_partials': float(len(fresh))}
            if not fresh:
                return {**stats, 'version': float(version)}
            noise_ids = np.fromiter((p.noise_id for p in fresh), dtype=np.int64, count=len(fresh))
            returns_pos = np.fromiter((p.return_pos for p in fresh), dtype=np.float64, count=len(fresh))
            if self._antithetic:
                returns_neg = np.fromiter((p.return_neg for p in fresh), dtype=np.float64, count=len(fresh))
                all_returns = np.concatenate([returns_pos, returns_neg])
                shaped = self._shape(all_returns)
                weights = shaped[: len(fresh)] - shaped[len(fresh) :]
            else:
                all_returns = returns_pos
                weights = self._shape(all_returns)
            gradient = es_gradient(self._noise, noise_ids, weights, self._dim, self._sigma, all_returns.size)
            # only an update (one at a time) changes theta and the Adam state: the step can run outside the lock
            theta = self._adam.step(self._theta, gradient)
            step_norm = float(np.linalg.norm(theta - self._theta))
            with self._lock:
                self._theta = theta  # a new array: a reader holding the old one keeps a consistent copy
                write_flat_parameters(self._model, torch.from_numpy(theta))
                self._version += 1
                version = self._version
            param_norm = float(np.linalg.norm(theta))
            return {
                **stats,
                'version': float(version),
                'return_mean': float(all_returns.mean()),
                'return_max': float(all_returns.max()),
                'return_min': float(all_returns.min()),
                'grad_norm': float(np.linalg.norm(gradient)),
                'step_norm': step_norm,
                'param_norm': param_norm,
                'cur_lr': self._adam.learning_rate,
            }

    def _shape(self, returns: np.ndarray) -> np.ndarray:
        if self._rank_shaping:
            return centred_ranks(returns).astype(np.float64)
        return returns - returns.mean()

    def worker_spec(self) -> dict[str, Any]:
        """Everything a remote worker needs to build its rollout (JSON data; ``ESRollout.from_spec`` reads it)."""
        if self._model_given:
            raise ValueError('ESPolicy.worker_spec: the model was given as an object; describe it in policy.model')
        model_cfg = copy.deepcopy(dict(self._cfg.model))
        model_type = model_cfg.pop('type', None)
        import_names = list(model_cfg.pop('import_names', []))
        if model_type is None:
            model_type, import_names = self.default_model()
        ccfg = self._cfg.collect
        env = {k: v for k, v in (ccfg.get('env') or {}).items() if k not in ('cfg_type', 'allow_unknown_keys')}
        if not env.get('type') and not env.get('env_id'):
            raise ValueError(
                "policy.collect.env: give a ding env ({'type': name, 'import_names': [...]}) or a gymnasium id "
                "({'env_id': 'CartPole-v1'})"
            )
        max_steps = ccfg.get('max_episode_steps')
        spec = {
            'spec_version': WORKER_SPEC_VERSION,
            'env': env,
            'model': {'type': model_type, 'import_names': import_names, 'kwargs': model_cfg},
            'dim': self._dim,
            'noise_table': {'seed': self._noise.seed, 'size': self._noise.size},
            'sigma': self._sigma,
            'antithetic': self._antithetic,
            'max_episode_steps': None if max_steps is None else int(max_steps),
        }
        try:
            # a round trip turns tuples into lists and EasyDicts into dicts; a non-JSON value fails here
            return json.loads(json.dumps(spec, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise ValueError(f'ESPolicy.worker_spec: policy.model / policy.collect.env must be JSON data: {e}') from e

    # ---- checkpoints ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Model weights, Adam state and version (tensors, for safetensors checkpoints)."""
        with self._update_lock, self._lock:
            return {
                'model': {k: v.clone() for k, v in self._model.state_dict().items()},
                'optimizer': {
                    k: torch.as_tensor(v, dtype=torch.int64 if k == 'step' else torch.float32)
                    for k, v in self._adam.state_dict().items()
                },
                'version': torch.tensor(self._version, dtype=torch.int64),
            }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        with self._update_lock, self._lock:
            self._model.load_state_dict(state_dict['model'])
            self._theta = flat_parameters_of(self._model).numpy()
            if 'optimizer' in state_dict:
                self._adam.load_state_dict(state_dict['optimizer'])
            if 'version' in state_dict:
                self._version = int(state_dict['version'])

    # ---- policy modes ----------------------------------------------------------------------------------------
    def _init_learn(self) -> None:
        pass

    def _init_collect(self) -> None:
        pass

    def _init_eval(self) -> None:
        pass

    def _forward_learn(self, data: Any) -> dict[str, Any]:
        return self.update(data)

    def _forward_collect(self, data: dict[int, Any], **kwargs: Any) -> dict[int, dict[str, Any]]:
        raise NotImplementedError('ESPolicy: experience comes from ESRollout workers (ding -m es), not a collector')

    def _forward_eval(self, data: dict[int, Any]) -> dict[int, dict[str, Any]]:
        """The deterministic action of the unperturbed model for each env."""
        env_ids = list(data.keys())
        obs = stack_obs(list(data.values()), self._device)
        with self._lock, torch.no_grad():
            actions = greedy_action(self._model, obs).unbind(0)
        return {env_id: {'action': actions[i]} for i, env_id in enumerate(env_ids)}

    def _process_transition(self, obs: Any, policy_output: dict[str, Any], timestep: Any) -> dict[str, Any]:
        raise NotImplementedError('ESPolicy: no transitions (workers report episode returns)')

    def _get_train_sample(self, transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        raise NotImplementedError('ESPolicy: no train samples (workers report episode returns)')

    def _state_dict_learn(self) -> dict[str, Any]:
        return self.state_dict()

    def _load_state_dict_learn(self, state_dict: dict[str, Any]) -> None:
        self.load_state_dict(state_dict)

    def _load_state_dict_collect(self, state_dict: dict[str, Any]) -> None:
        self.load_state_dict({'model': state_dict['model']})

    _load_state_dict_eval = _load_state_dict_collect

    def _monitor_vars_learn(self) -> list[str]:
        return ['cur_lr', 'return_mean', 'return_max', 'grad_norm', 'step_norm', 'param_norm', 'stale_partials']


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'{key}: expected a positive int, got {value!r}')
    return value


def _non_negative_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f'{key}: expected an int >= 0, got {value!r}')
    return value


def _positive_float(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f'{key}: expected a positive number, got {value!r}')
    return float(value)
