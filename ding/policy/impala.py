"""IMPALA (Espeholt et al. 2018): V-trace actor-critic on unrolls of the async pipeline, feed-forward or LSTM."""

from __future__ import annotations

import copy
from typing import Any, Protocol, cast

import numpy as np
import torch
import torch.nn as nn

from ding.rl_utils import vtrace_data, vtrace_error_discrete_action
from ding.rl_utils.distribution import categorical_logp_entropy
from ding.torch_utils.numpy_chain import NumpyChain
from ding.utils.registry import POLICY_REGISTRY

from .base_policy import Policy
from .common_utils import build_adam, has_mode_dependent_layers, obs_to_tensor, reward_to_tensor, stack_obs, terminated

# The trajectory tensors a learner batch must carry (ding.worker.async_actor.protocol.TENSOR_KEYS).
BATCH_KEYS = ('obs', 'action', 'logit', 'reward', 'done', 'truncated', 'mask', 'first')
LOSS_STATS = (
    'total_loss',
    'policy_loss',
    'value_loss',
    'entropy_loss',
    'importance_ratio_mean',
    'value_mean',
    'grad_norm',
)
OPTIM_TYPES = ('adam', 'rmsprop')
IMPALA_LEARN_DEFAULTS: dict[str, Any] = dict(
    batch_size=2,
    learning_rate=0.0005,
    optim_type='adam',
    betas=(0.9, 0.999),
    eps=1e-8,
    alpha=0.99,
    momentum=0.0,
    value_weight=0.5,
    entropy_weight=0.01,
    grad_norm=40.0,
    discount_factor=0.99,
    lambda_=1.0,
    rho_clip_ratio=1.0,
    c_clip_ratio=1.0,
    rho_pg_clip_ratio=1.0,
)


class UnrollModel(Protocol):
    """What the policy needs of its model (``IMPALAVAC``, ``'impala_vac'``)."""

    def initial_state(self, batch_size: int, device: torch.device | str = 'cpu') -> Any: ...

    def step(self, obs: torch.Tensor, state: Any, first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]: ...

    def act(self, obs: torch.Tensor, state: Any, first: torch.Tensor) -> tuple[torch.Tensor, Any]: ...

    def unroll(self, obs: torch.Tensor, state: Any, first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]: ...

    # Optional: ``feedforward_actor() -> nn.Module | None``, the acting path as one module for the actors' numpy
    # chain (``IMPALAVAC.feedforward_actor``); without it the actors run ``act`` in torch.


@POLICY_REGISTRY.register('impala')
class IMPALAPolicy(Policy):
    """V-trace actor-critic trained on batches of unrolls (``ding.worker.async_actor.protocol``).

    One ``learn_mode.forward(batch)`` is one optimizer step on ``learn.batch_size`` unrolls: the model runs
    over all ``T + 1`` observations (one batched forward for a feed-forward model; an LSTM model unrolls from
    the batch's ``actor_state``, resetting where ``first``), V-trace targets and advantages come from the
    behaviour ``logit`` with thresholds ``rho_clip_ratio`` / ``c_clip_ratio`` / ``rho_pg_clip_ratio``; loss
    ``policy_loss + value_weight * value_loss - entropy_weight * entropy_loss``, gradients clipped to norm
    ``grad_norm`` (None: no clipping), optimizer ``optim_type`` ``'adam'`` or ``'rmsprop'``.

    Acting goes through the protocol's ``actor_model`` / ``actor_weights`` / ``initial_actor_state`` /
    ``actor_step``; ``eval_mode.forward({env_id: obs})`` acts greedily (keeping each env's LSTM state until
    ``eval_mode.reset([env_id])``) for the serial evaluator.
    """

    config = dict(
        type='impala',
        cuda=False,
        on_policy=False,
        priority=False,
        priority_IS_weight=False,
        action_space='discrete',
        model=dict(),
        learn=dict(IMPALA_LEARN_DEFAULTS),
        collect=dict(),
        eval=dict(),
        other=dict(),
    )

    def default_model(self) -> tuple[str, list[str]]:
        return 'impala_vac', ['ding.model.template.impala_vac']

    def _create_model(self, cfg, model: nn.Module | None) -> nn.Module:
        if cfg.get('action_space', 'discrete') != 'discrete':
            raise ValueError(f"{type(self).__name__}: policy.action_space must be 'discrete', got {cfg.action_space!r}")
        model = super()._create_model(cfg, model)
        missing = [m for m in ('act', 'step', 'unroll', 'initial_state') if not callable(getattr(model, m, None))]
        if missing:
            raise TypeError(
                f'{type(self).__name__}: the model ({type(model).__name__}) needs act / step / unroll / initial_state '
                f"(like 'impala_vac'); missing {missing}"
            )
        self._mode_sensitive = has_mode_dependent_layers(model)
        return model

    @property
    def _net(self) -> UnrollModel:
        return cast(UnrollModel, self._model)

    # ---- the async actor protocol ---------------------------------------------------------------
    def actor_model(self) -> nn.Module:
        """A CPU copy of the model for one actor thread, in eval mode, without gradients."""
        model = copy.deepcopy(self._model).cpu().eval()
        for param in model.parameters():
            param.grad = None  # the learner's gradients, if any, are of no use to an actor
        model.requires_grad_(False)
        return model

    def actor_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().to('cpu', copy=True) for k, v in self._model.state_dict().items()}

    def initial_actor_state(self, batch_size: int) -> Any:
        return self._net.initial_state(batch_size)

    def actor_step(
        self, model: nn.Module, obs: torch.Tensor, state: Any, first: torch.Tensor, greedy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        with torch.no_grad():
            logit, state = cast(UnrollModel, model).act(obs, state, first)
            if greedy:
                action = logit.argmax(dim=-1)
            else:
                # Gumbel-max: argmax(logit + Gumbel noise) is a sample from softmax(logit).
                action = (logit - torch.empty_like(logit).exponential_().log()).argmax(dim=-1)
        return action, logit, state

    def numpy_actor(self, model: nn.Module, example_obs: np.ndarray) -> NumpyChain | None:
        if example_obs.dtype != np.float32:
            return None  # image frames: the conv encoder is torch's job
        # A model without ``feedforward_actor`` (IMPALAVAC's, optional in ``UnrollModel``) acts in torch.
        build = getattr(model, 'feedforward_actor', None)
        actor = build() if callable(build) else None
        return None if actor is None else NumpyChain.trace(actor, torch.from_numpy(example_obs))

    # ---- learn ----------------------------------------------------------------------------------
    def _init_learn(self) -> None:
        cfg, lcfg = self._cfg, self._cfg.learn
        if cfg.priority or cfg.priority_IS_weight:
            raise ValueError(f'{type(self).__name__}: priority / priority_IS_weight are not supported')
        self._optimizer = self._build_optimizer()
        self._value_weight = float(lcfg.value_weight)
        self._entropy_weight = float(lcfg.entropy_weight)
        grad_norm = lcfg.get('grad_norm', None)
        self._grad_norm = float(grad_norm) if grad_norm else None
        self._gamma = float(lcfg.discount_factor)
        self._lambda = float(lcfg.lambda_)
        self._rho_clip_ratio = float(lcfg.rho_clip_ratio)
        self._c_clip_ratio = float(lcfg.c_clip_ratio)
        self._rho_pg_clip_ratio = float(lcfg.rho_pg_clip_ratio)
        if not 0.0 <= self._lambda <= 1.0:
            raise ValueError(f'policy.learn.lambda_ must be in [0, 1], got {lcfg.lambda_!r}')
        for key in ('rho_clip_ratio', 'c_clip_ratio', 'rho_pg_clip_ratio'):
            if not float(lcfg[key]) > 0.0:
                raise ValueError(f'policy.learn.{key} must be > 0, got {lcfg[key]!r}')
        self._params = [p for p in self._model.parameters() if p.requires_grad]
        self._model.train()

    def _build_optimizer(self) -> torch.optim.Optimizer:
        lcfg = self._cfg.learn
        optim_type = str(lcfg.get('optim_type', 'adam')).lower()
        if optim_type == 'adam':
            return build_adam(
                self._model.parameters(), lcfg.learning_rate, betas=tuple(lcfg.betas), eps=float(lcfg.eps)
            )
        if optim_type == 'rmsprop':
            return torch.optim.RMSprop(
                self._model.parameters(),
                lr=lcfg.learning_rate,
                alpha=float(lcfg.alpha),
                eps=float(lcfg.eps),
                momentum=float(lcfg.momentum),
            )
        raise ValueError(f'policy.learn.optim_type must be one of {OPTIM_TYPES}, got {lcfg.optim_type!r}')

    def _prepare_batch(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise TypeError(
                f'{type(self).__name__}.learn: expected a dict batch of unrolls (ding.worker.async_actor.protocol), '
                f'got {type(data).__name__}'
            )
        missing = [k for k in BATCH_KEYS if k not in data]
        if missing:
            raise KeyError(f'{type(self).__name__}.learn: the batch lacks the trajectory key(s) {missing}')
        batch = {k: data[k].to(self._device) for k in BATCH_KEYS}
        state = data.get('actor_state')
        if state is not None:
            state = tuple(s.to(self._device) for s in state)
        elif getattr(self._model, 'recurrent', False):
            raise KeyError(f"{type(self).__name__}.learn: a recurrent model needs the batch's 'actor_state'")
        batch['actor_state'] = state
        batch['mask'] = batch['mask'].float()
        batch['reward'] = batch['reward'].float()
        return batch

    def _forward_learn(self, data: Any) -> dict[str, Any]:
        batch = self._prepare_batch(data)
        if self._mode_sensitive:
            self._model.train()
        return self._train_step(batch)

    def _train_step(self, batch: dict[str, Any]) -> dict[str, Any]:
        """One optimizer step on ``batch``: the model over every observation, the loss, the update."""
        logit, value, _ = self._net.unroll(batch['obs'], batch['actor_state'], batch['first'])
        total, terms = self._loss(batch, logit[:-1], value)
        self._optimizer.zero_grad(set_to_none=True)
        # The losses average over valid steps: weight by their count (APPO shares this step).
        self.backward_and_sync_gradients(total, self._model, weight=float(batch['mask'].sum()))
        if self._grad_norm:
            grad_norm = torch.nn.utils.clip_grad_norm_(self._params, self._grad_norm)
        else:
            grad_norm = torch.zeros(())
        self._optimizer.step()
        with torch.no_grad():
            logp, _ = categorical_logp_entropy(logit[:-1], batch['action'])
            behaviour_logp, _ = categorical_logp_entropy(batch['logit'], batch['action'])
            ratio_mean = (logp - behaviour_logp).exp().mean()
        row = torch.stack([total.detach(), *terms, ratio_mean, value.detach().mean(), grad_norm.detach()])
        out = dict(zip(self._stat_names(), row.tolist()))
        out['cur_lr'] = self._optimizer.param_groups[0]['lr']
        return out

    def _loss(
        self, batch: dict[str, Any], target_logit: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The total loss and its detached (policy, value, entropy) terms."""
        loss = vtrace_error_discrete_action(
            vtrace_data(
                target_logit,
                batch['logit'],
                batch['action'],
                value,
                batch['reward'],
                None,
                batch['done'],
                batch['truncated'],
                batch['mask'],
            ),
            self._gamma,
            self._lambda,
            self._rho_clip_ratio,
            self._c_clip_ratio,
            self._rho_pg_clip_ratio,
        )
        total = loss.policy_loss + self._value_weight * loss.value_loss - self._entropy_weight * loss.entropy_loss
        return total, [loss.policy_loss.detach(), loss.value_loss.detach(), loss.entropy_loss.detach()]

    def _stat_names(self) -> tuple[str, ...]:
        return LOSS_STATS

    def _monitor_vars_learn(self) -> list[str]:
        return ['cur_lr', *self._stat_names()]

    # ---- collect / eval through env managers (per-env recurrent state) --------------------------
    def _init_collect(self) -> None:
        self._collect_states: dict[int, Any] = {}

    def _init_eval(self) -> None:
        self._eval_states: dict[int, Any] = {}

    def _act(self, data: dict[int, Any], states: dict[int, Any], greedy: bool) -> dict[int, dict[str, Any]]:
        env_ids = list(data.keys())
        obs = stack_obs(list(data.values()), self._device)
        first = torch.tensor([env_id not in states for env_id in env_ids], device=self._device)
        state = self._gather_state(env_ids, states)
        if self._mode_sensitive:
            self._model.eval()
        action, logit, state = self.actor_step(self._model, obs, state, first, greedy)
        if self._mode_sensitive:
            self._model.train()
        if state is not None:
            h, c = state
            for i, env_id in enumerate(env_ids):
                states[env_id] = (h[i : i + 1], c[i : i + 1])
        else:
            states.update(dict.fromkeys(env_ids))
        actions, logits = action.cpu().unbind(0), logit.cpu().unbind(0)
        return {env_id: {'action': actions[i], 'logit': logits[i]} for i, env_id in enumerate(env_ids)}

    def _gather_state(self, env_ids: list[int], states: dict[int, Any]) -> Any:
        initial = self._net.initial_state(1, self._device)
        if initial is None:
            return None
        rows = [states.get(env_id) or initial for env_id in env_ids]
        return torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows])

    def _forward_collect(self, data: dict[int, Any], **kwargs: Any) -> dict[int, dict[str, Any]]:
        """Sample actions for ``{env_id: obs}`` (env managers; the async pipeline acts through ``actor_step``)."""
        return self._act(data, self._collect_states, greedy=False)

    def _forward_eval(self, data: dict[int, Any]) -> dict[int, dict[str, Any]]:
        """The most likely action for ``{env_id: obs}``."""
        return self._act(data, self._eval_states, greedy=True)

    def _reset_collect(self, data_id: list[int] | None = None) -> None:
        _forget(self._collect_states, data_id)

    def _reset_eval(self, data_id: list[int] | None = None) -> None:
        _forget(self._eval_states, data_id)

    def _process_transition(self, obs: Any, policy_output: dict[str, Any], timestep: Any) -> dict[str, Any]:
        return {
            'obs': obs_to_tensor(obs),
            'action': policy_output['action'],
            'logit': policy_output['logit'],
            'reward': reward_to_tensor(timestep.reward),
            'done': terminated(timestep),
        }

    def _get_train_sample(self, transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        raise NotImplementedError(
            f'{type(self).__name__} trains on unrolls of the async pipeline (ding -m async), not on serial '
            'collector samples'
        )


def _forget(states: dict[int, Any], data_id: list[int] | None) -> None:
    if data_id is None:
        states.clear()
    else:
        for env_id in data_id:
            states.pop(env_id, None)
