"""``DQN``: encoder + (dueling) Q head, registered as ``'dqn'``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from ding.utils.registry import MODEL_REGISTRY

from ..common import DiscreteHead, DuelingHead, build_encoder
from ..common.layers import squeeze_shape


@MODEL_REGISTRY.register('dqn')
class DQN(nn.Module):
    """Q network: ``forward(obs) -> {'logit': q_values (B, action_shape)}``.

    ``head_hidden_size`` defaults to the encoder's output width (``encoder_hidden_size_list[-1]``).
    Image observations (``obs_shape`` ``(C, H, W)``) go through a conv encoder, the Nature CNN with
    ``encoder_hidden_size_list=None``; uint8 frames are scaled by 1/255.
    """

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        action_shape: int | Sequence[int],
        encoder_hidden_size_list: Sequence[int] | None = (128, 128, 64),
        dueling: bool = True,
        head_hidden_size: int | None = None,
        head_layer_num: int = 1,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
        dropout: float | None = None,
    ) -> None:
        super().__init__()
        obs_shape = squeeze_shape(obs_shape, 'obs_shape')
        action_shape = squeeze_shape(action_shape, 'action_shape')
        if not isinstance(action_shape, int):
            raise ValueError(f'DQN: action_shape must be a single int (discrete actions), got {action_shape}')
        self.obs_shape, self.action_shape = obs_shape, action_shape
        self.encoder = build_encoder(obs_shape, encoder_hidden_size_list, activation, norm_type)
        feature = self.encoder.output_size
        head_cls = DuelingHead if dueling else DiscreteHead
        self.head = head_cls(
            feature if head_hidden_size is None else head_hidden_size,
            action_shape,
            head_layer_num,
            activation=activation,
            norm_type=norm_type,
            dropout=dropout,
            input_size=feature,
        )

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.head(self.encoder(x))
