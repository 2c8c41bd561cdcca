"""``VAC``: value + actor-critic network for PPO / A2C, registered as ``'vac'``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from ding.utils.registry import MODEL_REGISTRY

from ..common import DiscreteHead, RegressionHead, ReparameterizationHead, build_encoder
from ..common.layers import squeeze_shape


@MODEL_REGISTRY.register('vac')
class VAC(nn.Module):
    """Actor and critic on a shared (or separate) encoder.

    ``forward(obs, mode)`` with ``mode`` one of:
      - ``'compute_actor'``: ``{'logit': (B, A)}`` (discrete) or ``{'logit': {'mu', 'sigma'}}`` (continuous)
      - ``'compute_critic'``: ``{'value': (B,)}``
      - ``'compute_actor_critic'``: both, from one encoder pass when the encoder is shared.
    """

    mode = ('compute_actor', 'compute_critic', 'compute_actor_critic')
    action_spaces = ('discrete', 'continuous')

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        action_shape: int | Sequence[int],
        action_space: str = 'discrete',
        share_encoder: bool = True,
        encoder_hidden_size_list: Sequence[int] | None = (128, 128, 64),
        actor_head_hidden_size: int = 64,
        actor_head_layer_num: int = 1,
        critic_head_hidden_size: int = 64,
        critic_head_layer_num: int = 1,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
        sigma_type: str = 'independent',
        fixed_sigma_value: float = 0.3,
        bound_type: str | None = None,
    ) -> None:
        super().__init__()
        if action_space not in self.action_spaces:
            raise ValueError(f'VAC: action_space must be one of {self.action_spaces}, got {action_space!r}')
        obs_shape = squeeze_shape(obs_shape, 'obs_shape')
        action_shape = squeeze_shape(action_shape, 'action_shape')
        if not isinstance(action_shape, int):
            raise ValueError(f'VAC: action_shape must be a single int, got {action_shape}')
        self.obs_shape, self.action_shape, self.action_space = obs_shape, action_shape, action_space
        self.share_encoder = share_encoder
        hidden = None if encoder_hidden_size_list is None else list(encoder_hidden_size_list)  # None: Nature CNN
        if share_encoder:
            self.encoder = build_encoder(obs_shape, hidden, activation, norm_type)
            actor_in = critic_in = self.encoder.output_size
        else:
            self.actor_encoder = build_encoder(obs_shape, hidden, activation, norm_type)
            self.critic_encoder = build_encoder(obs_shape, hidden, activation, norm_type)
            actor_in = critic_in = self.actor_encoder.output_size
        self.critic_head = RegressionHead(
            critic_head_hidden_size,
            1,
            critic_head_layer_num,
            activation=activation,
            norm_type=norm_type,
            input_size=critic_in,
        )
        self.actor_head: DiscreteHead | ReparameterizationHead
        if action_space == 'discrete':
            self.actor_head = DiscreteHead(
                actor_head_hidden_size,
                action_shape,
                actor_head_layer_num,
                activation=activation,
                norm_type=norm_type,
                input_size=actor_in,
            )
        else:
            self.actor_head = ReparameterizationHead(
                actor_head_hidden_size,
                action_shape,
                actor_head_layer_num,
                sigma_type=sigma_type,
                fixed_sigma_value=fixed_sigma_value,
                activation=activation,
                norm_type=norm_type,
                bound_type=bound_type,
                input_size=actor_in,
            )

    # Groupings for parameter initialisation. Plain lists (not registered sub-modules), so a shared encoder
    # appears once in the state dict.
    @property
    def actor(self) -> list[nn.Module]:
        return [self.encoder if self.share_encoder else self.actor_encoder, self.actor_head]

    @property
    def critic(self) -> list[nn.Module]:
        return [self.encoder if self.share_encoder else self.critic_encoder, self.critic_head]

    def forward(self, x: torch.Tensor, mode: str) -> dict[str, torch.Tensor]:
        if mode == 'compute_actor_critic':
            return self.compute_actor_critic(x)
        if mode == 'compute_actor':
            return self.compute_actor(x)
        if mode == 'compute_critic':
            return self.compute_critic(x)
        raise ValueError(f'VAC.forward: mode must be one of {self.mode}, got {mode!r}')

    def _actor_out(self, feature: torch.Tensor):
        out = self.actor_head(feature)
        return out['logit'] if self.action_space == 'discrete' else out

    def compute_actor(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        feature = (self.encoder if self.share_encoder else self.actor_encoder)(x)
        return {'logit': self._actor_out(feature)}

    def compute_critic(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        feature = (self.encoder if self.share_encoder else self.critic_encoder)(x)
        return {'value': self.critic_head(feature)['pred']}

    def compute_actor_critic(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.share_encoder:
            actor_feature = critic_feature = self.encoder(x)
        else:
            actor_feature, critic_feature = self.actor_encoder(x), self.critic_encoder(x)
        return {'logit': self._actor_out(actor_feature), 'value': self.critic_head(critic_feature)['pred']}
