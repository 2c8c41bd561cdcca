"""Distributional Q networks: ``C51DQN`` (``'c51dqn'``, categorical over fixed atoms) and ``QRDQN``
(``'qrdqn'``, quantile values). Both return the expected Q values as ``'logit'``, so DQN's greedy and
epsilon-greedy acting applies unchanged."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from ding.utils.registry import MODEL_REGISTRY

from ..common import DiscreteHead, build_encoder
from ..common.layers import squeeze_shape


class _DistributionalQ(nn.Module):
    """Encoder + one head emitting ``per_action`` numbers for each action: (B, action_shape, per_action)."""

    def __init__(
        self,
        name: str,
        obs_shape: int | Sequence[int],
        action_shape: int | Sequence[int],
        per_action: int,
        encoder_hidden_size_list: Sequence[int] | None,
        head_hidden_size: int | None,
        head_layer_num: int,
        activation: nn.Module | None,
        norm_type: str | None,
    ) -> None:
        super().__init__()
        obs_shape = squeeze_shape(obs_shape, 'obs_shape')
        action_shape = squeeze_shape(action_shape, 'action_shape')
        if not isinstance(action_shape, int):
            raise ValueError(f'{name}: action_shape must be a single int (discrete actions), got {action_shape}')
        self.obs_shape, self.action_shape, self.per_action = obs_shape, action_shape, per_action
        self.encoder = build_encoder(obs_shape, encoder_hidden_size_list, activation, norm_type)
        feature = self.encoder.output_size
        self.head = DiscreteHead(
            feature if head_hidden_size is None else head_hidden_size,
            action_shape * per_action,
            head_layer_num,
            activation=activation,
            norm_type=norm_type,
            input_size=feature,
        )

    def _per_action(self, x: torch.Tensor) -> torch.Tensor:
        out = self.head(self.encoder(x))['logit']
        return out.reshape(out.shape[0], self.action_shape, self.per_action)


@MODEL_REGISTRY.register('c51dqn')
class C51DQN(_DistributionalQ):
    """``forward(obs) -> {'logit': Q (B, A), 'distribution': probabilities (B, A, n_atom)}`` over the atoms
    ``linspace(v_min, v_max, n_atom)``; ``Q = sum_j p_j z_j``."""

    support: torch.Tensor  # a buffer: the atoms

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        action_shape: int | Sequence[int],
        encoder_hidden_size_list: Sequence[int] | None = (128, 128, 64),
        head_hidden_size: int | None = None,
        head_layer_num: int = 1,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
        v_min: float = -10.0,
        v_max: float = 10.0,
        n_atom: int = 51,
    ) -> None:
        if n_atom < 2 or not v_min < v_max:
            raise ValueError(f'C51DQN: need n_atom >= 2 and v_min < v_max, got n_atom={n_atom}, [{v_min}, {v_max}]')
        super().__init__(
            'C51DQN', obs_shape, action_shape, n_atom, encoder_hidden_size_list, head_hidden_size, head_layer_num,
            activation, norm_type,
        )  # fmt: skip
        self.v_min, self.v_max, self.n_atom = float(v_min), float(v_max), int(n_atom)
        self.register_buffer('support', torch.linspace(v_min, v_max, n_atom), persistent=False)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        distribution = torch.softmax(self._per_action(x), dim=-1)
        return {'logit': (distribution * self.support).sum(-1), 'distribution': distribution}


@MODEL_REGISTRY.register('qrdqn')
class QRDQN(_DistributionalQ):
    """``forward(obs) -> {'logit': Q (B, A), 'q': quantiles (B, A, num_quantiles), 'tau': (B, num_quantiles, 1)}``;
    quantile ``i`` estimates the fraction ``tau_i = (2i + 1) / (2 num_quantiles)``; ``Q`` is the quantiles' mean."""

    tau: torch.Tensor  # a buffer: the quantile midpoints

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        action_shape: int | Sequence[int],
        encoder_hidden_size_list: Sequence[int] | None = (128, 128, 64),
        head_hidden_size: int | None = None,
        head_layer_num: int = 1,
        num_quantiles: int = 32,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
    ) -> None:
        if num_quantiles < 1:
            raise ValueError(f'QRDQN: num_quantiles must be >= 1, got {num_quantiles}')
        super().__init__(
            'QRDQN', obs_shape, action_shape, num_quantiles, encoder_hidden_size_list, head_hidden_size,
            head_layer_num, activation, norm_type,
        )  # fmt: skip
        self.num_quantiles = int(num_quantiles)
        midpoints = (torch.arange(num_quantiles, dtype=torch.float32) + 0.5) / num_quantiles
        self.register_buffer('tau', midpoints, persistent=False)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        q = self._per_action(x)
        tau = self.tau.reshape(1, -1, 1).expand(q.shape[0], -1, -1)
        return {'logit': q.mean(-1), 'q': q, 'tau': tau}
