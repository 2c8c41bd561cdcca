"""TD3: a deterministic actor, twin Q critics (clipped double-Q), target policy smoothing, delayed actor updates."""

from __future__ import annotations

from typing import Any

import torch

from ding.rl_utils.continuous_q import smooth_target_action, twin_q_loss, twin_q_target
from ding.utils.registry import POLICY_REGISTRY

from .common_utils import build_adam
from .continuous_ac_common import ContinuousActorCriticBase


@POLICY_REGISTRY.register('td3')
class TD3Policy(ContinuousActorCriticBase):
    """TD3 (Fujimoto et al. 2018).

    Every iteration the critics regress on ``r + gamma (1 - done) min_i Q'_i(s', a')``, where ``a'`` is the target
    actor's action plus clipped Gaussian noise (``learn.noise``: ``noise_sigma``, clipped to ``noise_range``).
    Every ``actor_update_freq`` iterations the actor maximises ``Q_1(s, pi(s))`` and the target networks (actor
    and critics) move by ``target_theta``. Collecting adds ``collect.noise_sigma`` Gaussian noise to the actor's
    action (clipped to [-1, 1]).
    """

    config = dict(
        type='td3',
        cuda=False,
        on_policy=False,
        priority=False,
        priority_IS_weight=False,
        random_collect_size=25000,
        model=dict(twin_critic=True, action_space='regression'),
        learn=dict(
            update_per_collect=1,
            batch_size=256,
            learning_rate_actor=1e-3,
            learning_rate_critic=1e-3,
            ignore_done=False,
            target_theta=0.005,
            discount_factor=0.99,
            actor_update_freq=2,
            noise=True,
            noise_sigma=0.2,
            noise_range=dict(min=-0.5, max=0.5),
        ),
        collect=dict(n_sample=1, unroll_len=1, noise_sigma=0.1),
        eval=dict(),
        other=dict(replay_buffer=dict(replay_buffer_size=100000)),
    )

    def _init_learn(self) -> None:
        learn = self._cfg.learn
        if int(learn.actor_update_freq) < 1:
            raise ValueError(f'TD3Policy: policy.learn.actor_update_freq must be >= 1, got {learn.actor_update_freq}')
        if not learn.noise_range.min <= learn.noise_range.max:
            raise ValueError(f'TD3Policy: policy.learn.noise_range needs min <= max, got {dict(learn.noise_range)}')
        self._gamma = float(learn.discount_factor)
        self._ignore_done = bool(learn.ignore_done)
        self._priority = bool(self._cfg.priority)
        self._priority_IS_weight = bool(self._cfg.priority_IS_weight)
        self._batch_size = int(learn.batch_size)  # read by the learner's data loader via get_attribute
        self._actor_net, self._critic_net = self._actor_and_critic()
        self._actor_update_freq = int(learn.actor_update_freq)
        self._noise = bool(learn.noise)
        self._noise_sigma = float(learn.noise_sigma)
        self._noise_min, self._noise_max = float(learn.noise_range.min), float(learn.noise_range.max)
        self._optimizer_actor = build_adam(self._actor_net.parameters(), learn.learning_rate_actor)
        self._optimizer_critic = build_adam(self._critic_net.parameters(), learn.learning_rate_critic)
        self._init_target(learn.target_theta)
        self._learn_count = 0
        self._last_actor_loss = 0.0
        self._model.train()

    def _forward_learn(self, data: Any) -> dict[str, Any]:
        obs, next_obs, action, reward, done, weight = self._learn_batch(
            data, self._ignore_done, self._priority_IS_weight
        )
        with torch.no_grad():
            next_action = self._target_model(next_obs, mode='compute_actor')['action']
            if self._noise:
                next_action = smooth_target_action(next_action, self._noise_sigma, self._noise_min, self._noise_max)
            target = twin_q_target(self._critic(self._target_model, next_obs, next_action), reward, done, self._gamma)
        q_value = self._critic(self._model, obs, action)
        critic_loss, td_error = twin_q_loss(q_value, target, weight)
        self._optimizer_critic.zero_grad(set_to_none=True)
        self.backward_and_sync_gradients(critic_loss, self._critic_net, weight=obs.shape[0])
        self._optimizer_critic.step()

        self._learn_count += 1
        if self._learn_count % self._actor_update_freq == 0:
            new_action = self._model(obs, mode='compute_actor')['action']
            actor_loss = -self._critic(self._model, obs, new_action)[0].mean()
            self._optimizer_actor.zero_grad(set_to_none=True)
            self.backward_and_sync_gradients(actor_loss, self._actor_net, weight=obs.shape[0])
            self._optimizer_actor.step()
            self._soft_update_target()
            self._last_actor_loss = actor_loss.item()
        info = {
            'cur_lr_actor': self._optimizer_actor.param_groups[0]['lr'],
            'cur_lr_critic': self._optimizer_critic.param_groups[0]['lr'],
            'critic_loss': critic_loss.item(),
            'actor_loss': self._last_actor_loss,  # the latest delayed update's
            'total_loss': critic_loss.item() + self._last_actor_loss,
            'q_value': q_value[0].detach().mean().item(),
            'target_q_value': target.mean().item(),
        }
        if self._priority:
            info['priority'] = td_error.abs().cpu().numpy().tolist()
        return info

    def _monitor_vars_learn(self) -> list[str]:
        return [
            'cur_lr_actor', 'cur_lr_critic', 'critic_loss', 'actor_loss', 'total_loss', 'q_value', 'target_q_value'
        ]  # fmt: skip

    def _state_dict_learn(self) -> dict[str, Any]:
        return {
            'model': self._model.state_dict(),
            'target_model': self._target_model.state_dict(),
            'optimizer_actor': self._optimizer_actor.state_dict(),
            'optimizer_critic': self._optimizer_critic.state_dict(),
        }

    def _load_state_dict_learn(self, state_dict: dict[str, Any]) -> None:
        self._model.load_state_dict(state_dict['model'])
        self._target_model.load_state_dict(state_dict.get('target_model', state_dict['model']))
        if 'optimizer_actor' in state_dict:
            self._optimizer_actor.load_state_dict(state_dict['optimizer_actor'])
        if 'optimizer_critic' in state_dict:
            self._optimizer_critic.load_state_dict(state_dict['optimizer_critic'])

    # ---- acting -------------------------------------------------------------------------------------
    def _init_collect(self) -> None:
        super()._init_collect()
        self._collect_noise_sigma = float(self._cfg.collect.noise_sigma)

    def _act(self, obs: torch.Tensor) -> torch.Tensor:
        action = self._model(obs, mode='compute_actor')['action']
        return (action + torch.randn_like(action) * self._collect_noise_sigma).clamp(-1.0, 1.0)

    def _greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self._model(obs, mode='compute_actor')['action']
