"""What the async (Sebulba-style) pipeline asks of a policy and of a vectorised env, and the trajectory layout.

The actor threads of ``ding.worker.async_actor`` step a :class:`VectorEnv` (``ding.envs.vector``) with
batched inference through an :class:`AsyncActorPolicy` (IMPALA, APPO), write each unroll into preallocated
tensors and queue it for the learner, whose ``BaseLearner.train`` hands the policy a batch of unrolls.

Trajectory layout: time-major tensors, ``T`` = ``unroll_len``, ``B`` = envs (several unrolls are joined on
dim 1 for a learner batch; recurrent states on their batch dim):

================  ===================  ===============================================================
key               shape / dtype        meaning
================  ===================  ===============================================================
``obs``           [T+1, B, *obs]       observations; ``obs[T]`` is the bootstrap observation. float32,
                                       or uint8 for image envs (the model scales them).
``action``        [T, B] int64         actions taken (discrete action spaces).
``logit``         [T, B, A] float32    the behaviour policy's logits for ``obs[t]``.
``reward``        [T, B] float32       reward of step ``t``.
``done``          [T, B] bool          the episode terminated at step ``t``: no bootstrap beyond it.
``truncated``     [T, B] bool          a time limit cut the episode at step ``t``: ``obs[t+1]`` is its final
                                       observation, bootstrap from it.
``mask``          [T, B] float32       0.0 at an env's reset step (both backends reset an env on the step
                                       *after* its episode ended, ignoring that step's action and returning
                                       the first observation of the next episode with reward 0): such steps
                                       carry no transition; losses and V-trace corrections skip them.
``first``         [T+1, B] bool        ``obs[t]`` is the first observation of an episode (a recurrent
                                       state is reset to its initial value before reading it).
================  ===================  ===============================================================

Beside the tensors every unroll carries its ``initial_state`` (the actor state before ``obs[0]``; None
for feed-forward models, a tuple of ``[B, ...]`` tensors otherwise), its ``final_state`` (after
``obs[T-1]``, the next unroll's initial state) and the ``policy_version`` (learner iteration of the
weights) it was collected with. The learner batch passes the initial states under the key
``'actor_state'`` (None or the tuple joined on the batch dim).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from ding.torch_utils.numpy_chain import NumpyChain

TENSOR_KEYS = ('obs', 'action', 'logit', 'reward', 'done', 'truncated', 'mask', 'first')


class AsyncActorPolicy(Protocol):
    """The policy side: one model copy per actor thread, batched acting, weights to publish.

    ``learn_mode.forward(batch)`` (through ``BaseLearner.train``) trains on a dict with the
    ``TENSOR_KEYS`` plus ``'actor_state'``.
    """

    def actor_model(self) -> torch.nn.Module:
        """A new copy of the model for one actor thread (eval mode, no gradients)."""
        ...

    def actor_weights(self) -> dict[str, torch.Tensor]:
        """A detached CPU copy of the learner model's weights, for ``actor_model().load_state_dict``."""
        ...

    def initial_actor_state(self, batch_size: int) -> Any:
        """The actor state before an episode's first observation, for ``batch_size`` envs (None if stateless)."""
        ...

    def actor_step(
        self, model: torch.nn.Module, obs: torch.Tensor, state: Any, first: torch.Tensor, greedy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Act for a batch: ``(action [B] int64, logit [B, A], new_state)``.

        ``first`` [B] bool marks envs whose ``obs`` starts an episode (their state is reset first);
        ``greedy`` picks the most likely action (evaluation) instead of sampling.
        """
        ...

    def numpy_actor(self, model: torch.nn.Module, example_obs: np.ndarray) -> NumpyChain | None:
        """``model``'s logits for observations like ``example_obs`` ``[B, *obs]`` as a numpy chain, when the
        model is feed-forward and small enough for that to pay (the actor then samples in numpy); None keeps
        :meth:`actor_step`. The chain reads ``model``'s parameters, so ``load_state_dict`` updates it."""
        ...


class VectorEnv(Protocol):
    """A batch of ``num_envs`` envs stepped together (``ding.envs.vector``: EnvPool or gymnasium vector).

    Both backends reset an env on the step after its episode ended (see ``mask`` above). ``send`` /
    ``recv`` split ``step`` so that an actor can run inference for one env group while another steps.
    """

    num_envs: int
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    action_num: int

    def reset(self, seed: int) -> np.ndarray:
        """Reset every env; the first observations, ``[num_envs, *observation_shape]``."""
        ...

    def send(self, actions: np.ndarray) -> None:
        """Start one step of every env with ``actions`` ``[num_envs]``; returns at once."""
        ...

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Wait for the step started by ``send``: ``(obs, reward float32, terminated bool, truncated bool)``, each
        ``[num_envs, ...]``."""
        ...

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``send`` then ``recv``."""
        ...

    def close(self) -> None: ...
