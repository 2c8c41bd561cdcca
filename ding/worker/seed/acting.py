"""Acting on the learner side: one forward for the observations of every waiting actor, with the newest weights.

``BatchActing`` runs an ``AsyncActorPolicy`` (``ding.worker.async_actor.protocol``) on a batch joined from
several actors: each actor's recurrent state (one row per env) is kept here between its requests, reset by the
policy where an observation starts an episode and dropped with a dropped actor (a rejoined actor starts from
the initial state); the state before an actor's last request is kept too, as the initial state of the unroll
that starts there. With ``eps`` given (SEED DQN) each actor explores epsilon-greedily with its own epsilon.
``QNetActing`` is that protocol for a Q network (DQN's model): the greedy action and the Q values as logits.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ding.torch_utils import WeightLoader
from ding.torch_utils.numpy_chain import NumpyChain
from ding.worker.async_actor.actor import copy_state
from ding.worker.async_actor.protocol import AsyncActorPolicy
from ding.worker.async_actor.queues import StagingQueue


class QNetActing:
    """``AsyncActorPolicy`` of a Q network (``model(obs)['logit']`` = Q values): the argmax action, the Q values
    as the logit; exploration is the caller's (``BatchActing``'s per-actor epsilon)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def actor_model(self) -> torch.nn.Module:
        model = copy.deepcopy(self.model).cpu().eval()
        model.requires_grad_(False)
        return model

    def actor_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().to('cpu', copy=True) for k, v in self.model.state_dict().items()}

    def initial_actor_state(self, batch_size: int) -> Any:
        return None

    def actor_step(
        self, model: torch.nn.Module, obs: torch.Tensor, state: Any, first: torch.Tensor, greedy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        with torch.no_grad():
            q = model(obs)['logit']
        return q.argmax(dim=-1), q, None

    def numpy_actor(self, model: torch.nn.Module, example_obs: np.ndarray) -> NumpyChain | None:
        return None  # the inference server's batches are large: torch acts


def _split_state(state: Any, sizes: Sequence[int]) -> list[Any]:
    if state is None:
        return [None] * len(sizes)
    if isinstance(state, torch.Tensor):
        return list(state.split(list(sizes)))
    parts = [s.split(list(sizes)) for s in state]
    return [tuple(p[i] for p in parts) for i in range(len(sizes))]


def _join_state(states: Sequence[Any]) -> Any:
    if states[0] is None:
        return None
    if isinstance(states[0], torch.Tensor):
        return torch.cat(list(states))
    return tuple(torch.cat([s[i] for s in states]) for i in range(len(states[0])))


class BatchActing:
    """The policy acting for the inference server, on the newest weights published to ``staging``.

    ``act(obs, first, segments)``: ``segments`` lists ``(actor_id, n_envs)`` of the rows in order; returns
    actions ``[B] int64``, logits ``[B, A] float32`` and the weights' version. ``eps`` (one per actor id) makes
    each actor's rows epsilon-greedy with its own epsilon.
    """

    def __init__(self, policy: AsyncActorPolicy, staging: StagingQueue, eps: Sequence[float] | None = None) -> None:
        self.policy = policy
        self.staging = staging
        self.eps = None if eps is None else [float(e) for e in eps]
        self.model = policy.actor_model()
        self._weights = WeightLoader(self.model)
        self.version: int | None = None
        self._states: dict[int, Any] = {}  # per actor: its envs' state after its last request
        self._before: dict[int, Any] = {}  # ... and before it
        self._rng = np.random.default_rng()

    def refresh(self) -> int:
        """Load the newest published weights (waits for the first copy); their version."""
        newest = self.staging.newest(self.version, timeout=None if self.version is None else 0.0)
        if newest is not None:
            version, weights = newest
            self._weights.load(weights)
            self.version = version
        assert self.version is not None
        return self.version

    def forget(self, actor_id: int) -> None:
        """Drop an actor's recurrent state (it left; a rejoin starts from the initial state)."""
        self._states.pop(actor_id, None)
        self._before.pop(actor_id, None)

    def state_before(self, actor_id: int) -> Any:
        """The recurrent state of ``actor_id``'s envs before the observations of its last request (an unroll
        starting at that request carries it as ``initial_state``); None for feed-forward models."""
        return self._before.get(actor_id)

    def _state_of(self, actor_id: int, n_envs: int) -> Any:
        state = self._states.get(actor_id)
        return state if state is not None else copy_state(self.policy.initial_actor_state(n_envs))

    def act(
        self, obs: np.ndarray, first: np.ndarray, segments: Sequence[tuple[int, int]]
    ) -> tuple[np.ndarray, np.ndarray, int]:
        version = self.refresh()
        sizes = [n for _, n in segments]
        states = [self._state_of(actor_id, n) for actor_id, n in segments]
        with torch.no_grad():
            action, logit, new_state = self.policy.actor_step(
                self.model, torch.from_numpy(obs), _join_state(states), torch.from_numpy(first)
            )
        # Kept as they are: whoever keeps one beyond the next request copies it (the assembler does).
        for (actor_id, _), before, after in zip(segments, states, _split_state(new_state, sizes)):
            self._before[actor_id] = before
            self._states[actor_id] = after
        actions = action.numpy().astype(np.int64, copy=True)
        logits = logit.numpy()
        if self.eps is not None:
            row = 0
            for actor_id, n in segments:
                explore = self._rng.random(n) < self.eps[actor_id]
                if explore.any():
                    actions[row : row + n][explore] = self._rng.integers(0, logits.shape[-1], int(explore.sum()))
                row += n
        return actions, logits, version


__all__ = ['BatchActing', 'QNetActing']
