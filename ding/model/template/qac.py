"""``ContinuousQAC``: actor and (twin) Q critic for continuous actions (SAC, TD3), registered as
``'continuous_qac'`` (alias ``'qac'``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from ding.utils.registry import MODEL_REGISTRY

from ..common import RegressionHead, ReparameterizationHead, fc_block
from ..common.layers import squeeze_shape


@MODEL_REGISTRY.register('continuous_qac')
class ContinuousQAC(nn.Module):
    """Actions in [-1, 1]; vector observations.

    ``action_space``:
      - ``'regression'`` (TD3): a deterministic actor, ``compute_actor(obs) -> {'action': tanh(...) (B, A)}``
      - ``'reparameterization'`` (SAC): a Gaussian actor before the tanh squashing,
        ``compute_actor(obs) -> {'logit': [mu, sigma]}`` (each (B, A), log-sigma clamped to [-20, 2])

    ``compute_critic({'obs', 'action'}) -> {'q_value': q (B,)}``, or ``[q1, q2]`` with ``twin_critic=True``.
    Each network is one ``hidden_size`` layer on its input followed by a head of ``*_head_layer_num`` hidden
    layers and the output layer.
    """

    mode = ('compute_actor', 'compute_critic')
    action_spaces = ('regression', 'reparameterization')

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        action_shape: int | Sequence[int],
        action_space: str = 'reparameterization',
        twin_critic: bool = False,
        actor_head_hidden_size: int = 64,
        actor_head_layer_num: int = 1,
        critic_head_hidden_size: int = 64,
        critic_head_layer_num: int = 1,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
    ) -> None:
        super().__init__()
        if action_space not in self.action_spaces:
            raise ValueError(f'ContinuousQAC: action_space must be one of {self.action_spaces}, got {action_space!r}')
        obs_shape = squeeze_shape(obs_shape, 'obs_shape')
        action_shape = squeeze_shape(action_shape, 'action_shape')
        if not isinstance(obs_shape, int) or not isinstance(action_shape, int):
            raise ValueError(
                f'ContinuousQAC: obs_shape and action_shape must be single ints, got {obs_shape}, {action_shape}'
            )
        self.obs_shape, self.action_shape, self.action_space = obs_shape, action_shape, action_space
        self.twin_critic = twin_critic
        actor_head: RegressionHead | ReparameterizationHead
        if action_space == 'regression':
            actor_head = RegressionHead(
                actor_head_hidden_size, action_shape, actor_head_layer_num, final_tanh=True,
                activation=activation, norm_type=norm_type,
            )  # fmt: skip
        else:
            actor_head = ReparameterizationHead(
                actor_head_hidden_size, action_shape, actor_head_layer_num, sigma_type='conditioned',
                activation=activation, norm_type=norm_type,
            )  # fmt: skip
        self.actor = nn.Sequential(fc_block(obs_shape, actor_head_hidden_size, activation, norm_type), actor_head)
        critic_in = obs_shape + action_shape
        self.critic = nn.ModuleList(
            nn.Sequential(
                fc_block(critic_in, critic_head_hidden_size, activation, norm_type),
                RegressionHead(
                    critic_head_hidden_size, 1, critic_head_layer_num, activation=activation, norm_type=norm_type
                ),
            )
            for _ in range(2 if twin_critic else 1)
        )

    def forward(self, inputs: Any, mode: str) -> dict[str, Any]:
        if mode == 'compute_actor':
            return self.compute_actor(inputs)
        if mode == 'compute_critic':
            return self.compute_critic(inputs)
        raise ValueError(f'ContinuousQAC.forward: mode must be one of {self.mode}, got {mode!r}')

    def compute_actor(self, obs: torch.Tensor) -> dict[str, Any]:
        out = self.actor(obs)
        if self.action_space == 'regression':
            return {'action': out['pred'].reshape(obs.shape[0], self.action_shape)}
        return {'logit': [out['mu'], out['sigma']]}

    def compute_critic(self, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
        obs, action = inputs['obs'], inputs['action']
        if action.dim() == obs.dim() - 1:  # (B,) actions of a 1-D action space
            action = action.unsqueeze(-1)
        x = torch.cat([obs, action.to(obs.dtype)], dim=-1)
        q = [critic(x)['pred'] for critic in self.critic]
        return {'q_value': q if self.twin_critic else q[0]}


MODEL_REGISTRY.register('qac', ContinuousQAC)
