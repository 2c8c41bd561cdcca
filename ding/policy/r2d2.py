"""R2D2 (Kapturowski et al. 2019): a recurrent double DQN learning from stored sequences with burn-in, n-step
targets on rescaled values and sequence priorities."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn as nn

from ding.config.merge import deep_merge_dicts
from ding.rl_utils import (
    get_epsilon_greedy_fn,
    get_sequence_train_sample,
    q_nstep_td_data,
    q_nstep_td_error_with_rescale,
)
from ding.utils.collate import default_collate
from ding.utils.registry import POLICY_REGISTRY

from .common_utils import build_adam, has_mode_dependent_layers, stack_obs
from .dqn import DQNPolicy

LSTMState = tuple[torch.Tensor, torch.Tensor]

_LEARN_KEYS = ['obs', 'burnin_mask', 'prev_state', 'action', 'reward', 'done', 'value_gamma', 'bootstrap_step', 'mask']


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def gather_states(states: dict[int, LSTMState], env_ids: list[int], initial: LSTMState) -> LSTMState:
    """The batched state of ``env_ids``: each env's kept state, or its row of ``initial`` when it has none."""
    h, c = initial
    for row, env_id in enumerate(env_ids):
        kept = states.get(env_id)
        if kept is not None:
            h[row], c[row] = kept
    return h, c


def burn_in(model: nn.Module, obs: torch.Tensor, valid: torch.Tensor, state: LSTMState) -> LSTMState:
    """The state after unrolling ``model`` on ``obs`` (T, B, ...) from ``state``, skipping the steps where
    ``valid`` (T, B) is False (a sequence's burn-in that reaches before its trajectory's start)."""
    if obs.shape[0] == 0:
        return state
    if bool(valid.all()):
        return model({'obs': obs, 'prev_state': state})['next_state']
    for t in range(obs.shape[0]):
        stepped = model({'obs': obs[t], 'prev_state': state}, inference=True)['next_state']
        keep = valid[t].unsqueeze(-1)
        state = (torch.where(keep, stepped[0], state[0]), torch.where(keep, stepped[1], state[1]))
    return state


@POLICY_REGISTRY.register('r2d2')
class R2D2Policy(DQNPolicy):
    """R2D2 on a ``drqn`` model.

    Collecting keeps each env's recurrent state between steps (dropped by ``reset([env_id])`` when its
    episode ends) and stores the state before each step in the transition. A trajectory becomes sequences
    of ``burnin_step + learn_unroll_len`` steps (``get_sequence_train_sample``) that start from the state
    stored with their first step. Learning replays the burn-in part without gradient from that state (for the
    online and the target network alike), then trains on the ``learn_unroll_len`` steps with n-step double-Q
    targets, rescaled by ``h`` when ``learn.value_rescale``. A sequence's priority is
    ``learn.priority_eta * max_t |td_t| + (1 - priority_eta) * mean_t |td_t|``; with ``priority_IS_weight`` the
    buffer's ``IS`` weight scales the sequence's loss. Target network: ``learn.target_update_freq`` set copies
    the online weights every that many updates, otherwise it moves by ``learn.target_update_theta`` each update.
    """

    config = dict(
        type='r2d2',
        cuda=False,
        on_policy=False,
        priority=False,
        priority_IS_weight=False,
        discount_factor=0.997,
        nstep=5,
        burnin_step=2,
        learn_unroll_len=40,
        model=dict(),
        learn=dict(
            update_per_collect=4,
            batch_size=64,
            learning_rate=0.0005,
            target_update_freq=None,
            target_update_theta=0.001,
            value_rescale=True,
            priority_eta=0.9,
            ignore_done=False,
        ),
        # traj_len_inf: a whole episode becomes sequences at once, so every sequence but the first has its burn-in.
        collect=dict(n_sample=32, traj_len_inf=True, env_num=None),
        eval=dict(env_num=None),
        other=dict(
            eps=dict(type='exp', start=0.95, end=0.05, decay=10000),
            replay_buffer=dict(replay_buffer_size=10000),
        ),
    )

    def __init__(self, cfg: dict, model: nn.Module | None = None, enable_field: list[str] | None = None) -> None:
        merged = deep_merge_dicts(type(self).default_config(), cfg)
        for where, section in (('policy.unroll_len', merged), ('policy.collect.unroll_len', merged.collect)):
            if 'unroll_len' in section:  # older DI-engine configs: the trained length is learn_unroll_len now
                raise ValueError(
                    f'r2d2: {where} is not used; a sequence is policy.burnin_step + policy.learn_unroll_len steps'
                )
        super().__init__(merged, model, enable_field)

    def default_model(self) -> tuple[str, list[str]]:
        return 'drqn', ['ding.model.template.q_learning']

    # ---- learn ----------------------------------------------------------------------------------
    def _init_learn(self) -> None:
        cfg = self._cfg
        self._priority = cfg.priority
        self._priority_IS_weight = cfg.priority_IS_weight
        self._gamma = float(cfg.discount_factor)
        self._nstep = int(cfg.nstep)
        self._burnin_step = int(cfg.burnin_step)
        self._value_rescale = bool(cfg.learn.value_rescale)
        self._priority_eta = float(cfg.learn.priority_eta)
        self._ignore_done = bool(cfg.learn.ignore_done)
        self._batch_size = int(cfg.learn.batch_size)  # read by the learner's data loader via get_attribute
        self._optimizer = build_adam(self._model.parameters(), cfg.learn.learning_rate)
        self._target_model = _copy_frozen(self._model)
        # DQNPolicy._update_target reads these
        if cfg.learn.target_update_freq:
            self._target_update_type, self._target_update_freq = 'assign', int(cfg.learn.target_update_freq)
        else:
            self._target_update_type, self._target_theta = 'momentum', float(cfg.learn.target_update_theta)
        self._online_tensors = list(self._model.state_dict(keep_vars=True).values())
        self._target_tensors = list(self._target_model.state_dict(keep_vars=True).values())
        self._learn_count = 0
        self._model.train()
        self._target_model.train()

    def _forward_learn(self, data: Any) -> dict[str, Any]:
        if isinstance(data, (list, tuple)):
            keys = _LEARN_KEYS + (['IS'] if self._priority_IS_weight and 'IS' in data[0] else [])
            data = default_collate(list(data), keys)
        if self._cuda:
            data = {k: (v.to(self._device) if isinstance(v, torch.Tensor) else v) for k, v in data.items()}
            data['prev_state'] = [s.to(self._device) for s in data['prev_state']]
        obs = data['obs'].transpose(0, 1)  # (burnin + U + nstep, B, ...)
        state = (data['prev_state'][0], data['prev_state'][1])
        burnin_valid = data['burnin_mask'].t()
        # per trained step, time-major (U, B)
        action, done, value_gamma = data['action'].t(), data['done'].t(), data['value_gamma'].t()
        bootstrap_step, mask = data['bootstrap_step'].t(), data['mask'].t().float()
        reward = data['reward'].permute(2, 1, 0)  # (B, U, nstep) -> (nstep, U, B)
        unroll, batch = action.shape
        burnin = self._burnin_step

        with torch.no_grad():
            online_state = burn_in(self._model, obs[:burnin], burnin_valid, state)
            target_state = burn_in(self._target_model, obs[:burnin], burnin_valid, state)
            target_q = self._target_model({'obs': obs[burnin:], 'prev_state': target_state})['logit']
        q = self._model({'obs': obs[burnin:], 'prev_state': online_state})['logit']  # (U + nstep, B, A)

        # the bootstrap of trained step t is read at step t + k (k real steps ahead, k <= nstep)
        at = (torch.arange(unroll, device=q.device).unsqueeze(1) + bootstrap_step).unsqueeze(-1)
        at = at.expand(-1, -1, q.shape[-1])
        next_action = q.detach().gather(0, at).argmax(-1)  # double DQN: the online net picks ...
        next_q = target_q.gather(0, at)  # ... the target net scores

        # every trained step of a sequence weighs its IS weight; the mean runs over the real (unpadded) steps
        weight = mask * (mask.numel() / mask.sum().clamp(min=1.0))
        if self._priority_IS_weight and 'IS' in data:
            weight = weight * data['IS'].float().reshape(1, batch)
        if self._ignore_done:
            done = torch.zeros_like(done)
        flat = unroll * batch
        td_data = q_nstep_td_data(
            q[:unroll].reshape(flat, -1),
            next_q.reshape(flat, -1),
            action.reshape(flat),
            next_action.reshape(flat),
            reward.reshape(self._nstep, flat),
            done.reshape(flat),
            weight.reshape(flat),
        )
        rescale = {} if self._value_rescale else {'trans_fn': _identity, 'inv_trans_fn': _identity}
        loss, td_error = q_nstep_td_error_with_rescale(
            td_data, self._gamma, self._nstep, value_gamma=value_gamma.reshape(flat), **rescale
        )

        self._optimizer.zero_grad(set_to_none=True)
        self.backward_and_sync_gradients(loss, self._model, weight=batch)
        self._optimizer.step()
        self._update_target()

        info = {
            'cur_lr': self._optimizer.param_groups[0]['lr'],
            'total_loss': loss.item(),
            'q_value': q.detach().mean().item(),
            'target_q_value': target_q.mean().item(),
        }
        if self._priority:
            info['priority'] = sequence_priority(td_error.reshape(unroll, batch), mask, self._priority_eta).tolist()
        return info

    # ---- collect --------------------------------------------------------------------------------
    def _init_collect(self) -> None:
        cfg = self._cfg
        self._gamma = float(cfg.discount_factor)
        self._nstep = int(cfg.nstep)
        self._burnin_step = int(cfg.burnin_step)
        self._learn_unroll_len = int(cfg.learn_unroll_len)
        self._unroll_len = self._burnin_step + self._learn_unroll_len  # the sequence length, for the collector
        eps = cfg.other.eps
        self._eps_fn = get_epsilon_greedy_fn(eps.start, eps.end, eps.decay, eps.type)
        self._collect_steps = 0
        self._mode_sensitive = has_mode_dependent_layers(self._model)
        self._collect_state: dict[int, LSTMState] = {}

    def _reset_collect(self, data_id: list[int] | None = None) -> None:
        _forget(self._collect_state, data_id)

    def _step(self, states: dict[int, LSTMState], data: dict[int, Any]) -> tuple[list[int], torch.Tensor, LSTMState]:
        """One batched recurrent step for ``{env_id: obs}``: (env ids, Q values, the states before the step);
        ``states`` moves on to the states after it."""
        env_ids = list(data.keys())
        obs = stack_obs(list(data.values()), self._device)
        # a recurrent model (DRQN's state API): nn.Module's own typing cannot know it
        initial_state = cast(Callable[[int, torch.device], LSTMState], self._model.initial_state)
        prev = gather_states(states, env_ids, initial_state(len(env_ids), self._device))
        if self._mode_sensitive:
            self._model.eval()
        with torch.no_grad():
            out = self._model({'obs': obs, 'prev_state': prev}, inference=True)
        if self._mode_sensitive:
            self._model.train()
        h, c = out['next_state']
        for row, env_id in enumerate(env_ids):
            states[env_id] = (h[row], c[row])
        return env_ids, out['logit'], prev

    # Narrower than Policy's ``**kwargs`` on purpose: an unknown collect argument fails the collect task.
    def _forward_collect(  # type: ignore[override]
        self, data: dict[int, Any], eps: float | None = None
    ) -> dict[int, dict[str, Any]]:
        """Epsilon-greedy actions for ``{env_id: obs}``; each output holds ``prev_state``, the env's state before
        this step (what a sequence starting here replays from)."""
        env_ids, q, (h, c) = self._step(self._collect_state, data)
        n = len(env_ids)
        if eps is None:
            eps = self._eps_fn(self._collect_steps)
        self._collect_steps += n
        action = q.argmax(dim=-1)
        if eps > 0:
            explore = torch.rand(n, device=q.device) < eps
            action = torch.where(explore, torch.randint(0, q.shape[-1], (n,), device=q.device), action)
        if self._cuda:
            q, action, h, c = q.cpu(), action.cpu(), h.cpu(), c.cpu()
        # clones: a row view would keep the whole batch's state alive in the replay buffer
        return {
            env_id: {'action': action[i], 'logit': q[i], 'prev_state': (h[i].clone(), c[i].clone())}
            for i, env_id in enumerate(env_ids)
        }

    def _process_transition(self, obs: Any, policy_output: dict[str, Any], timestep: Any) -> dict[str, Any]:
        transition = super()._process_transition(obs, policy_output, timestep)
        transition['prev_state'] = policy_output['prev_state']
        return transition

    def _get_train_sample(self, transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return get_sequence_train_sample(
            transitions, self._burnin_step, self._learn_unroll_len, self._nstep, self._gamma
        )

    # ---- eval -----------------------------------------------------------------------------------
    def _init_eval(self) -> None:
        self._mode_sensitive = has_mode_dependent_layers(self._model)
        self._eval_state: dict[int, LSTMState] = {}

    def _reset_eval(self, data_id: list[int] | None = None) -> None:
        _forget(self._eval_state, data_id)

    def _forward_eval(self, data: dict[int, Any]) -> dict[int, dict[str, Any]]:
        env_ids, q, _ = self._step(self._eval_state, data)
        action = q.argmax(dim=-1)
        if self._cuda:
            q, action = q.cpu(), action.cpu()
        return {env_id: {'action': action[i], 'logit': q[i]} for i, env_id in enumerate(env_ids)}


def sequence_priority(td_error: torch.Tensor, mask: torch.Tensor, eta: float) -> torch.Tensor:
    """R2D2's sequence priority from TD errors (T, B) and a mask of the real steps (T, B):
    ``eta * max_t |td| + (1 - eta) * mean_t |td|`` over the real steps, one value per sequence (B,)."""
    abs_td = td_error.detach().abs() * mask
    mean = abs_td.sum(0) / mask.sum(0).clamp(min=1.0)
    return (eta * abs_td.max(0).values + (1 - eta) * mean).cpu()


def _forget(states: dict[int, LSTMState], data_id: list[int] | None) -> None:
    """Drop the kept states of ``data_id`` (all of them for None): those envs start from the initial state."""
    if data_id is None:
        states.clear()
        return
    for env_id in data_id:
        states.pop(env_id, None)


def _copy_frozen(model: nn.Module) -> nn.Module:
    """A copy of ``model`` that takes no gradient (the target network)."""
    target = copy.deepcopy(model)
    for p in target.parameters():
        p.requires_grad_(False)
    return target
