"""SAC (soft actor-critic): twin Q critics with soft-updated targets, a tanh-Gaussian actor, automatic entropy
tuning."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from ding.rl_utils.continuous_q import tanh_gaussian_sample, twin_q_loss, twin_q_target
from ding.utils.pytorch_ddp_dist_helper import sync_gradients as sync_gradients_over_ranks
from ding.utils.registry import POLICY_REGISTRY

from .common_utils import build_adam
from .continuous_ac_common import ContinuousActorCriticBase


@POLICY_REGISTRY.register('sac')
class SACPolicy(ContinuousActorCriticBase):
    """SAC (Haarnoja et al. 2018, with the learned temperature of the follow-up paper).

    Per training iteration: the critics regress on ``r + gamma (1 - done) (min_i Q'_i(s', a') - alpha log pi(a'|s'))``
    with ``a' ~ pi(s')``; the actor minimises ``alpha log pi(a|s) - min_i Q_i(s, a)`` over reparameterised
    ``a ~ pi(s)``; with ``learn.auto_alpha`` the temperature follows ``-log alpha (log pi(a|s) + target_entropy)``
    (``target_entropy`` None: ``-action_shape``); then the target critics move by ``target_theta``.
    """

    config = dict(
        type='sac',
        cuda=False,
        on_policy=False,
        priority=False,
        priority_IS_weight=False,
        random_collect_size=10000,
        model=dict(twin_critic=True, action_space='reparameterization'),
        learn=dict(
            update_per_collect=1,
            batch_size=256,
            learning_rate_q=3e-4,
            learning_rate_policy=3e-4,
            learning_rate_alpha=3e-4,
            target_theta=0.005,
            discount_factor=0.99,
            alpha=0.2,
            auto_alpha=True,
            log_space=True,
            target_entropy=None,
            ignore_done=False,
        ),
        collect=dict(n_sample=1, unroll_len=1),
        eval=dict(),
        other=dict(replay_buffer=dict(replay_buffer_size=1000000)),
    )

    def _init_learn(self) -> None:
        learn = self._cfg.learn
        if learn.alpha <= 0:
            raise ValueError(f'SACPolicy: policy.learn.alpha must be > 0, got {learn.alpha}')
        self._gamma = float(learn.discount_factor)
        self._ignore_done = bool(learn.ignore_done)
        self._priority = bool(self._cfg.priority)
        self._priority_IS_weight = bool(self._cfg.priority_IS_weight)
        self._batch_size = int(learn.batch_size)  # read by the learner's data loader via get_attribute
        self._actor_net, self._critic_net = self._actor_and_critic()
        self._optimizer_q = build_adam(self._critic_net.parameters(), learn.learning_rate_q)
        self._optimizer_policy = build_adam(self._actor_net.parameters(), learn.learning_rate_policy)
        self._auto_alpha = bool(learn.auto_alpha)
        self._log_space = bool(learn.log_space)
        target_entropy = learn.target_entropy
        self._target_entropy = -float(self._action_size()) if target_entropy is None else float(target_entropy)
        # The temperature: log(alpha) (log_space) or alpha itself; learned only with auto_alpha.
        start = math.log(learn.alpha) if self._log_space else float(learn.alpha)
        self._alpha_param = nn.Parameter(torch.tensor(start, device=self._device), requires_grad=self._auto_alpha)
        self._optimizer_alpha = build_adam([self._alpha_param], learn.learning_rate_alpha) if self._auto_alpha else None
        self._init_target(learn.target_theta)
        self._model.train()

    def _alpha(self) -> torch.Tensor:
        return self._alpha_param.exp() if self._log_space else self._alpha_param.clamp_min(0.0)

    def _forward_learn(self, data: Any) -> dict[str, Any]:
        obs, next_obs, action, reward, done, weight = self._learn_batch(
            data, self._ignore_done, self._priority_IS_weight
        )
        alpha = self._alpha().detach()
        with torch.no_grad():
            next_action, next_log_prob = tanh_gaussian_sample(*self._model(next_obs, mode='compute_actor')['logit'])
            next_q = self._critic(self._target_model, next_obs, next_action)
            target = twin_q_target(next_q, reward, done, self._gamma, next_log_prob, alpha)
        q_value = self._critic(self._model, obs, action)
        critic_loss, td_error = twin_q_loss(q_value, target, weight)
        self._optimizer_q.zero_grad(set_to_none=True)
        self.backward_and_sync_gradients(critic_loss, self._critic_net, weight=obs.shape[0])
        self._optimizer_q.step()

        new_action, log_prob = tanh_gaussian_sample(*self._model(obs, mode='compute_actor')['logit'])
        new_q = torch.stack(self._critic(self._model, obs, new_action)).min(0).values
        policy_loss = (alpha * log_prob - new_q).mean()
        self._optimizer_policy.zero_grad(set_to_none=True)
        self.backward_and_sync_gradients(policy_loss, self._actor_net, weight=obs.shape[0])
        self._optimizer_policy.step()

        info = {
            'cur_lr_q': self._optimizer_q.param_groups[0]['lr'],
            'cur_lr_p': self._optimizer_policy.param_groups[0]['lr'],
            'critic_loss': critic_loss.item(),
            'policy_loss': policy_loss.item(),
            'total_loss': critic_loss.item() + policy_loss.item(),
            'q_value': q_value[0].detach().mean().item(),
            'target_q_value': target.mean().item(),
            'entropy': -log_prob.detach().mean().item(),
        }
        if self._optimizer_alpha is not None:
            # d(loss)/d(param) has the sign of -(log pi + target_entropy): alpha grows while the entropy is too low.
            alpha_loss = -(self._alpha_param * (log_prob.detach() + self._target_entropy)).mean()
            self._optimizer_alpha.zero_grad(set_to_none=True)
            alpha_loss.backward()
            sync_gradients_over_ranks([self._alpha_param], weight=obs.shape[0])  # alpha stays one value on every rank
            self._optimizer_alpha.step()
            info['alpha_loss'] = alpha_loss.item()
        info['alpha'] = self._alpha().item()
        self._soft_update_target()
        if self._priority:
            info['priority'] = td_error.abs().cpu().numpy().tolist()
        return info

    def _monitor_vars_learn(self) -> list[str]:
        names = ['cur_lr_q', 'cur_lr_p', 'critic_loss', 'policy_loss', 'total_loss', 'q_value', 'target_q_value']
        names += ['entropy', 'alpha'] + (['alpha_loss'] if self._auto_alpha else [])
        return names

    def _state_dict_learn(self) -> dict[str, Any]:
        state = {
            'model': self._model.state_dict(),
            'target_model': self._target_model.state_dict(),
            'optimizer_q': self._optimizer_q.state_dict(),
            'optimizer_policy': self._optimizer_policy.state_dict(),
            'alpha': self._alpha_param.detach().clone(),
        }
        if self._optimizer_alpha is not None:
            state['optimizer_alpha'] = self._optimizer_alpha.state_dict()
        return state

    def _load_state_dict_learn(self, state_dict: dict[str, Any]) -> None:
        self._model.load_state_dict(state_dict['model'])
        self._target_model.load_state_dict(state_dict.get('target_model', state_dict['model']))
        for name in ('optimizer_q', 'optimizer_policy', 'optimizer_alpha'):
            optimizer = getattr(self, f'_{name}')
            if name in state_dict and optimizer is not None:
                optimizer.load_state_dict(state_dict[name])
        if 'alpha' in state_dict:
            with torch.no_grad():
                self._alpha_param.copy_(state_dict['alpha'])

    # ---- acting -------------------------------------------------------------------------------------
    def _act(self, obs: torch.Tensor) -> torch.Tensor:
        mu, sigma = self._model(obs, mode='compute_actor')['logit']
        return tanh_gaussian_sample(mu, sigma)[0]

    def _greedy(self, obs: torch.Tensor) -> torch.Tensor:
        mu, _ = self._model(obs, mode='compute_actor')['logit']
        return torch.tanh(mu)
