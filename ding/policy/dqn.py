"""Double DQN with a target network, dueling head (model side), n-step returns and prioritized replay support."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn as nn

from ding.config.merge import deep_merge_dicts
from ding.rl_utils import get_epsilon_greedy_fn, get_nstep_return_data, q_nstep_td_data, q_nstep_td_target
from ding.utils.collate import default_collate
from ding.utils.registry import POLICY_REGISTRY

from .base_policy import Policy
from .common_utils import (
    build_adam,
    check_unroll_len,
    has_mode_dependent_layers,
    obs_to_tensor,
    reward_to_tensor,
    stack_obs,
    terminated,
)


@POLICY_REGISTRY.register('dqn')
class DQNPolicy(Policy):
    """Double DQN: the online network picks the next action, the target network scores it.

    Target network: ``learn.target_update_type='assign'`` copies the online weights every
    ``learn.target_update_freq`` updates; ``'momentum'`` moves it by ``learn.target_theta`` every update.

    Samples (from ``collect_mode.get_train_sample``): ``obs``, ``next_obs`` (``nstep`` steps ahead), ``action``,
    ``reward`` (a scalar, or an (nstep,) vector when ``nstep > 1``), ``done`` (True only for a real termination;
    a time-limit truncation bootstraps) and, when ``nstep > 1``, ``value_gamma`` (``gamma ** k`` for the ``k``
    real steps). With ``priority_IS_weight`` the buffer's ``IS`` weights scale each sample's loss.
    """

    config = dict(
        type='dqn',
        cuda=False,
        on_policy=False,
        priority=False,
        priority_IS_weight=False,
        discount_factor=0.97,
        nstep=1,
        model=dict(),
        learn=dict(
            update_per_collect=3,
            batch_size=64,
            learning_rate=0.001,
            target_update_type='assign',
            target_update_freq=100,
            target_theta=0.005,
            ignore_done=False,
        ),
        collect=dict(n_sample=8, unroll_len=1),
        eval=dict(),
        other=dict(
            eps=dict(type='exp', start=0.95, end=0.1, decay=10000),
            replay_buffer=dict(replay_buffer_size=10000),
        ),
    )

    def __init__(self, cfg: dict, model: nn.Module | None = None, enable_field: list[str] | None = None) -> None:
        cfg = deep_merge_dicts(type(self).default_config(), cfg)
        check_unroll_len(cfg, type(self).__name__)
        super().__init__(cfg, model, enable_field)

    def default_model(self) -> tuple[str, list[str]]:
        return 'dqn', ['ding.model.template.q_learning']

    # ---- learn ----------------------------------------------------------------------------------
    def _init_learn(self) -> None:
        cfg = self._cfg
        self._priority = cfg.priority
        self._priority_IS_weight = cfg.priority_IS_weight
        self._gamma = float(cfg.discount_factor)
        self._nstep = int(cfg.nstep)
        self._ignore_done = bool(cfg.learn.ignore_done)
        self._batch_size = int(cfg.learn.batch_size)  # read by the learner's data loader via get_attribute
        self._optimizer = build_adam(self._model.parameters(), cfg.learn.learning_rate)
        self._target_model = copy.deepcopy(self._model)
        for p in self._target_model.parameters():
            p.requires_grad_(False)
        update_type = cfg.learn.get('target_update_type', 'assign')
        if update_type in ('assign', 'hard') and cfg.learn.get('target_update_freq'):
            self._target_update_type, self._target_update_freq = 'assign', int(cfg.learn.target_update_freq)
        elif update_type in ('momentum', 'soft') or not cfg.learn.get('target_update_freq'):
            self._target_update_type, self._target_theta = 'momentum', float(cfg.learn.target_theta)
        else:
            raise ValueError(f"policy.learn.target_update_type must be 'assign' or 'momentum', got {update_type!r}")
        self._online_tensors = list(self._model.state_dict(keep_vars=True).values())
        self._target_tensors = list(self._target_model.state_dict(keep_vars=True).values())
        self._learn_count = 0
        self._mode_sensitive = has_mode_dependent_layers(self._model)
        self._model.train()
        self._target_model.train()
        keys = ['obs', 'next_obs', 'action', 'reward', 'done']
        if self._nstep > 1:
            keys.append('value_gamma')
        self._learn_keys = keys

    def _forward_learn(self, data: Any) -> dict[str, Any]:
        if isinstance(data, (list, tuple)):
            first = data[0]
            keys = self._learn_keys + [k for k in ('IS', 'weight') if k in first]
            data = default_collate(list(data), keys)
        obs, next_obs, action = data['obs'], data['next_obs'], data['action']
        reward, done = data['reward'], data['done']
        # The buffer's importance-sampling weights (key 'IS'); samples without them weigh 1.
        weight = data.get('IS') if self._priority_IS_weight else data.get('weight')
        value_gamma = data.get('value_gamma')
        if self._cuda:
            obs, next_obs, action, reward, done = (x.to(self._device) for x in (obs, next_obs, action, reward, done))
            weight = None if weight is None else weight.to(self._device)
            value_gamma = None if value_gamma is None else value_gamma.to(self._device)
        if reward.dim() == 2:  # (B, nstep) samples -> time-major (nstep, B)
            reward = reward.t()
        if self._ignore_done:
            done = torch.zeros_like(reward[0] if reward.dim() == 2 else reward)
        if self._mode_sensitive:
            self._model.train()

        # Separate passes: one forward over [obs; next_obs] would save a call but double the backward work.
        q_value = self._model(obs)['logit']
        with torch.no_grad():
            target_action = self._model(next_obs)['logit'].argmax(dim=-1)  # double DQN: online net picks
            target_q_value = self._target_model(next_obs)['logit']  # ... and the target net scores

        td_data = q_nstep_td_data(q_value, target_q_value, action, target_action, reward, done, weight)
        q_s_a, target_q_s_a = q_nstep_td_target(td_data, self._gamma, self._nstep, value_gamma=value_gamma)
        td_error = target_q_s_a - q_s_a
        sq = td_error.pow(2)
        loss = sq.mean() if weight is None else (sq * weight).mean()

        self._optimizer.zero_grad(set_to_none=True)
        # data parallel: the mean over every rank's batch
        self.backward_and_sync_gradients(loss, self._model, weight=obs.shape[0])
        self._optimizer.step()
        self._update_target()

        info = {
            'cur_lr': self._optimizer.param_groups[0]['lr'],
            'total_loss': loss.item(),
            'q_value': q_value.detach().mean().item(),
            'target_q_value': target_q_value.mean().item(),
        }
        if self._priority:
            info['priority'] = td_error.detach().abs().cpu().numpy().tolist()
        return info

    def _update_target(self) -> None:
        self._learn_count += 1
        with torch.no_grad():
            if self._target_update_type == 'assign':
                if self._learn_count % self._target_update_freq == 0:
                    torch._foreach_copy_(self._target_tensors, self._online_tensors)
            else:
                floats = [(t, o) for t, o in zip(self._target_tensors, self._online_tensors) if t.is_floating_point()]
                torch._foreach_lerp_([t for t, _ in floats], [o for _, o in floats], self._target_theta)

    def _monitor_vars_learn(self) -> list[str]:
        return ['cur_lr', 'total_loss', 'q_value', 'target_q_value']

    def _state_dict_learn(self) -> dict[str, Any]:
        return {
            'model': self._model.state_dict(),
            'target_model': self._target_model.state_dict(),
            'optimizer': self._optimizer.state_dict(),
        }

    def _load_state_dict_learn(self, state_dict: dict[str, Any]) -> None:
        self._model.load_state_dict(state_dict['model'])
        self._target_model.load_state_dict(state_dict.get('target_model', state_dict['model']))
        if 'optimizer' in state_dict:
            self._optimizer.load_state_dict(state_dict['optimizer'])

    # ---- collect --------------------------------------------------------------------------------
    def _init_collect(self) -> None:
        cfg = self._cfg
        self._gamma = float(cfg.discount_factor)
        self._nstep = int(cfg.nstep)
        eps = cfg.other.eps
        # Used only when the caller passes no ``eps``: the schedule at the number of env steps acted on so far.
        self._eps_fn = get_epsilon_greedy_fn(eps.start, eps.end, eps.decay, eps.type)
        self._collect_steps = 0
        self._mode_sensitive = has_mode_dependent_layers(self._model)

    # Narrower than Policy's ``**kwargs`` on purpose: an unknown collect argument fails the collect task.
    def _forward_collect(  # type: ignore[override]
        self, data: dict[int, Any], eps: float | None = None
    ) -> dict[int, dict[str, Any]]:
        """Epsilon-greedy actions for ``{env_id: obs}``: one batched forward, then per-env random overrides."""
        env_ids = list(data.keys())
        obs = stack_obs(list(data.values()), self._device)
        n = len(env_ids)
        if eps is None:
            eps = self._eps_fn(self._collect_steps)
        self._collect_steps += n
        if self._mode_sensitive:
            self._model.eval()
        with torch.no_grad():
            q = self._model(obs)['logit']
        if self._mode_sensitive:
            self._model.train()
        action = q.argmax(dim=-1)
        if eps > 0:
            explore = torch.rand(n, device=q.device) < eps
            action = torch.where(explore, torch.randint(0, q.shape[-1], (n,), device=q.device), action)
        if self._cuda:
            q, action = q.cpu(), action.cpu()
        # unbind: one call yields every per-env view (cheaper than indexing each row)
        actions, logits = action.unbind(0), q.unbind(0)
        return {env_id: {'action': actions[i], 'logit': logits[i]} for i, env_id in enumerate(env_ids)}

    def _process_transition(self, obs: Any, policy_output: dict[str, Any], timestep: Any) -> dict[str, Any]:
        return {
            'obs': obs_to_tensor(obs),
            'next_obs': obs_to_tensor(timestep.obs),
            'action': policy_output['action'],
            'reward': reward_to_tensor(timestep.reward),
            'done': terminated(timestep),
        }

    def _get_train_sample(self, transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return get_nstep_return_data(transitions, self._nstep, self._gamma)

    # ---- eval -----------------------------------------------------------------------------------
    def _init_eval(self) -> None:
        self._mode_sensitive = has_mode_dependent_layers(self._model)

    def _forward_eval(self, data: dict[int, Any]) -> dict[int, dict[str, Any]]:
        env_ids = list(data.keys())
        obs = stack_obs(list(data.values()), self._device)
        if self._mode_sensitive:
            self._model.eval()
        with torch.no_grad():
            q = self._model(obs)['logit']
        if self._mode_sensitive:
            self._model.train()
        action = q.argmax(dim=-1)
        if self._cuda:
            q, action = q.cpu(), action.cpu()
        # unbind: one call yields every per-env view (cheaper than indexing each row)
        actions, logits = action.unbind(0), q.unbind(0)
        return {env_id: {'action': actions[i], 'logit': logits[i]} for i, env_id in enumerate(env_ids)}
