"""``IMPALAVAC``: the IMPALA actor-critic, feed-forward or with an LSTM core, registered as ``'impala_vac'``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from ding.utils.registry import MODEL_REGISTRY

from ..common import DiscreteHead, RegressionHead, build_encoder
from ..common.layers import squeeze_shape

LSTMState = tuple[torch.Tensor, torch.Tensor]

VECTOR_ENCODER_SIZES = (64, 64)


class FloatObsActor(nn.Module):
    """Encoder then actor head on float32 observations: the logits only."""

    def __init__(self, encoder: nn.Module, actor_head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.actor_head = actor_head

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor_head(self.encoder(obs))['logit']


@MODEL_REGISTRY.register('impala_vac')
class IMPALAVAC(nn.Module):
    """Encoder -> optional LSTM core -> actor (discrete logits) and critic heads.

    ``lstm_hidden_size`` None / 0 makes the model feed-forward (its state is None); otherwise the state is
    ``(h, c)``, each ``[B, lstm_hidden_size]``, zeros at an episode's start, and the heads read the encoder's
    features joined with the LSTM output (without that skip, CartPole's large early value errors drove the
    LSTM into a near-constant output and the policy never left uniform). ``share_encoder=False`` gives the
    critic its own encoder and LSTM (the state then holds both halves: ``[B, 2 * lstm_hidden_size]``), so the
    value loss does not shape the policy's memory. Image observations (``obs_shape`` of
    length 3) go through a conv encoder (the Nature CNN by default); uint8 observations are scaled by 1/255.

    - ``step(obs [B, ...], state, first [B])``: one acting step -> ``(logit [B, A], value [B], new_state)``
    - ``unroll(obs [T, B, ...], state, first [T, B])``: a whole unroll -> ``(logit [T, B, A], value [T, B],
      final_state)``; the encoder and heads run once on all ``T * B`` observations.
    - ``forward(obs, mode)`` with VAC's modes (``'compute_actor'``, ``'compute_critic'``,
      ``'compute_actor_critic'``), feed-forward models only.
    """

    mode = ('compute_actor', 'compute_critic', 'compute_actor_critic')

    def __init__(
        self,
        obs_shape: int | Sequence[int],
        action_shape: int | Sequence[int],
        encoder_hidden_size_list: Sequence[int] | None = None,
        lstm_hidden_size: int | None = None,
        share_encoder: bool = True,
        actor_head_hidden_size: int = 64,
        actor_head_layer_num: int = 1,
        critic_head_hidden_size: int = 64,
        critic_head_layer_num: int = 1,
        activation: nn.Module | None = nn.ReLU(),
        norm_type: str | None = None,
    ) -> None:
        super().__init__()
        obs_shape = squeeze_shape(obs_shape, 'obs_shape')
        action_shape = squeeze_shape(action_shape, 'action_shape')
        if not isinstance(action_shape, int):
            raise ValueError(f'IMPALAVAC: action_shape must be a single int (discrete actions), got {action_shape}')
        if lstm_hidden_size is not None and int(lstm_hidden_size) < 0:
            raise ValueError(f'IMPALAVAC: lstm_hidden_size must be None, 0 or positive, got {lstm_hidden_size}')
        self.obs_shape, self.action_shape, self.action_space = obs_shape, action_shape, 'discrete'
        self.share_encoder = share_encoder
        sizes = encoder_hidden_size_list  # None: the Nature CNN for images, VECTOR_ENCODER_SIZES for vectors
        self.encoder = build_encoder(obs_shape, sizes, activation, norm_type, VECTOR_ENCODER_SIZES)
        self.critic_encoder = (
            None if share_encoder else build_encoder(obs_shape, sizes, activation, norm_type, VECTOR_ENCODER_SIZES)
        )
        feature_size = self.encoder.output_size
        self.lstm_hidden_size = int(lstm_hidden_size or 0)
        self.core: nn.LSTMCell | None = None
        self.critic_core: nn.LSTMCell | None = None
        if self.lstm_hidden_size:
            self.core = nn.LSTMCell(feature_size, self.lstm_hidden_size)
            if not share_encoder:
                self.critic_core = nn.LSTMCell(feature_size, self.lstm_hidden_size)
            feature_size += self.lstm_hidden_size
        self.actor_head = DiscreteHead(
            actor_head_hidden_size, action_shape, actor_head_layer_num, activation, norm_type, input_size=feature_size
        )
        self.critic_head = RegressionHead(
            critic_head_hidden_size, 1, critic_head_layer_num, activation=activation, norm_type=norm_type,
            input_size=feature_size,
        )  # fmt: skip
        # A near-uniform initial policy: small output weights for the logits.
        last = self.actor_head.main[-1]
        assert isinstance(last, nn.Linear)
        nn.init.normal_(last.weight, std=0.01)
        nn.init.zeros_(last.bias)

    @property
    def recurrent(self) -> bool:
        return self.core is not None

    def initial_state(self, batch_size: int, device: torch.device | str = 'cpu') -> LSTMState | None:
        """The state before an episode's first observation (None for a feed-forward model)."""
        if self.core is None:
            return None
        width = self.lstm_hidden_size * (1 if self.critic_core is None else 2)
        zeros = torch.zeros(batch_size, width, device=device)
        return zeros, zeros.clone()

    @staticmethod
    def _as_float(obs: torch.Tensor) -> torch.Tensor:
        """Observations as float32 (uint8 frames scaled to [0, 1])."""
        if obs.dtype == torch.uint8:
            return obs.float().mul_(1.0 / 255.0)
        return obs if obs.dtype == torch.float32 else obs.float()

    def _encode(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor and critic features (one tensor twice with a shared encoder)."""
        obs = self._as_float(obs)
        actor = self.encoder(obs)
        return actor, (actor if self.critic_encoder is None else self.critic_encoder(obs))

    def _core_step(
        self, actor: torch.Tensor, critic: torch.Tensor, state: LSTMState, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, LSTMState]:
        """One LSTM step (two with separate towers: the state holds the actor's then the critic's halves)."""
        assert self.core is not None
        keep = (~first.bool()).to(actor.dtype).unsqueeze(-1)  # zero (the initial state) where an episode starts
        h, c = state[0] * keep, state[1] * keep
        if self.critic_core is None:
            h, c = self.core(actor, (h, c))
            return h, h, (h, c)
        size = self.lstm_hidden_size
        h_actor, c_actor = self.core(actor, (h[:, :size], c[:, :size]))
        h_critic, c_critic = self.critic_core(critic, (h[:, size:], c[:, size:]))
        return h_actor, h_critic, (torch.cat([h_actor, h_critic], -1), torch.cat([c_actor, c_critic], -1))

    def _heads(
        self, actor: torch.Tensor, critic: torch.Tensor, h_actor: torch.Tensor | None, h_critic: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if h_actor is not None and h_critic is not None:  # the heads read the features joined with the LSTM output
            joined = torch.cat([actor, h_actor], dim=-1)
            critic = joined if self.critic_core is None else torch.cat([critic, h_critic], dim=-1)
            actor = joined
        return self.actor_head(actor)['logit'], self.critic_head(critic)['pred']

    def feedforward_actor(self) -> nn.Module | None:
        """The acting path of a feed-forward model on float32 observations, ``obs [B, ...] -> logit [B, A]``, as
        one module sharing this model's layers (for ``ding.torch_utils.NumpyChain``); None with an LSTM core."""
        return None if self.core is not None else FloatObsActor(self.encoder, self.actor_head)

    def act(
        self, obs: torch.Tensor, state: LSTMState | None, first: torch.Tensor
    ) -> tuple[torch.Tensor, LSTMState | None]:
        """One acting step: the logits and the next state, without the critic's head (actors need no value)."""
        if self.core is None:
            return self.actor_head(self.encoder(self._as_float(obs)))['logit'], None
        if state is None:
            raise ValueError('IMPALAVAC.act: a recurrent model needs a state (initial_state(batch_size))')
        actor, critic = self._encode(obs)  # a separate critic tower's LSTM state moves on too
        h_actor, _, state = self._core_step(actor, critic, state, first)
        return self.actor_head(torch.cat([actor, h_actor], dim=-1))['logit'], state

    def step(
        self, obs: torch.Tensor, state: LSTMState | None, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, LSTMState | None]:
        actor, critic = self._encode(obs)
        h_actor = h_critic = None
        if self.core is not None:
            if state is None:
                raise ValueError('IMPALAVAC.step: a recurrent model needs a state (initial_state(batch_size))')
            h_actor, h_critic, state = self._core_step(actor, critic, state, first)
        logit, value = self._heads(actor, critic, h_actor, h_critic)
        return logit, value, state

    def unroll(
        self, obs: torch.Tensor, state: LSTMState | None, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, LSTMState | None]:
        T, B = obs.shape[:2]
        actor, critic = self._encode(obs.reshape(T * B, *obs.shape[2:]))
        h_actor = h_critic = None
        if self.core is not None:
            if state is None:
                raise ValueError('IMPALAVAC.unroll: a recurrent model needs the unroll initial state')
            actor_steps, critic_steps = actor.reshape(T, B, -1), critic.reshape(T, B, -1)
            actor_out, critic_out = [], []
            for t in range(T):
                h_a, h_c, state = self._core_step(actor_steps[t], critic_steps[t], state, first[t])
                actor_out.append(h_a)
                critic_out.append(h_c)
            h_actor = torch.stack(actor_out).reshape(T * B, -1)
            h_critic = torch.stack(critic_out).reshape(T * B, -1)
        logit, value = self._heads(actor, critic, h_actor, h_critic)
        return logit.reshape(T, B, -1), value.reshape(T, B), state

    def forward(self, x: torch.Tensor, mode: str) -> dict[str, torch.Tensor]:
        if mode not in self.mode:
            raise ValueError(f'IMPALAVAC.forward: mode must be one of {self.mode}, got {mode!r}')
        if self.core is not None:
            raise ValueError('IMPALAVAC.forward: a recurrent model acts through step() / unroll() with its state')
        logit, value = self._heads(*self._encode(x), None, None)
        if mode == 'compute_actor':
            return {'logit': logit}
        if mode == 'compute_critic':
            return {'value': value}
        return {'logit': logit, 'value': value}
