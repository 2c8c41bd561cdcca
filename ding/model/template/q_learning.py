"""``DQN`` (encoder + (dueling) Q head, ``'dqn'``) and its recurrent form ``DRQN`` (``'drqn'``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


LSTMState = tuple[torch.Tensor, torch.Tensor]


@MODEL_REGISTRY.register('drqn')
class DRQN(nn.Module):
    """Recurrent Q network (R2D2): encoder -> LSTM core -> (dueling) Q head.

    The recurrent state is ``(h, c)``, each ``(B, lstm_hidden_size)``; ``initial_state(B)`` (zeros) is the state
    before an episode's first observation, and ``prev_state=None`` means it.

    - ``forward({'obs': (B, ...), 'prev_state': state}, inference=True)``: one step, ``logit`` (B, A);
    - ``forward({'obs': (T, B, ...), 'prev_state': state})``: a whole unroll, ``logit`` (T, B, A);

    both return ``next_state``, the state after the last observation. ``head_hidden_size`` (default: the
    encoder's output width) is also the LSTM's width, as in DI-engine.
    """

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        action_shape: int | Sequence[int],
        encoder_hidden_size_list: Sequence[int] = (128, 128, 64),
        dueling: bool = True,
        head_hidden_size: int | None = None,
        head_layer_num: int = 1,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
    ) -> None:
        super().__init__()
        obs_shape = squeeze_shape(obs_shape, 'obs_shape')
        action_shape = squeeze_shape(action_shape, 'action_shape')
        if not isinstance(action_shape, int):
            raise ValueError(f'DRQN: action_shape must be a single int (discrete actions), got {action_shape}')
        self.obs_shape, self.action_shape = obs_shape, action_shape
        self.encoder = build_encoder(obs_shape, list(encoder_hidden_size_list), activation, norm_type)
        feature = self.encoder.output_size
        self.lstm_hidden_size = feature if head_hidden_size is None else int(head_hidden_size)
        self.core = nn.LSTM(feature, self.lstm_hidden_size)
        head_cls = DuelingHead if dueling else DiscreteHead
        self.head = head_cls(
            self.lstm_hidden_size, action_shape, head_layer_num, activation=activation, norm_type=norm_type
        )

    def initial_state(self, batch_size: int, device: torch.device | str = 'cpu') -> LSTMState:
        """The state before an episode's first observation."""
        zeros = torch.zeros(batch_size, self.lstm_hidden_size, device=device)
        return zeros, zeros.clone()

    def forward(self, inputs: dict[str, Any], inference: bool = False) -> dict[str, Any]:
        obs = inputs['obs']
        if inference:
            obs = obs.unsqueeze(0)
        steps, batch = obs.shape[:2]
        state = inputs.get('prev_state')
        if state is None:
            state = self.initial_state(batch, obs.device)
        feature = self.encoder(obs.reshape(steps * batch, *obs.shape[2:]).float())
        # nn.LSTM keeps a leading layer dimension on its state; the public state has none.
        out, (h, c) = self.core(feature.reshape(steps, batch, -1), (state[0].unsqueeze(0), state[1].unsqueeze(0)))
        logit = self.head(out.reshape(steps * batch, -1))['logit'].reshape(steps, batch, -1)
        return {'logit': logit[0] if inference else logit, 'next_state': (h[0], c[0])}
