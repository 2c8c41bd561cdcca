"""Small, deterministic stand-ins for the async pipeline's env and policy (``ding.worker.async_actor.protocol``),
for tests of the pipeline's own parts (queues, buffers, actor threads) that must know every value written."""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import torch

from ding.torch_utils.numpy_chain import NumpyChain


class ScriptedVectorEnv:
    """``num_envs`` envs; env ``i``'s episodes last ``lengths[i]`` steps. The observation is ``[i, step of the
    episode]``, every step rewards 1, the last one terminates; the step after it is the reset step (action
    ignored, reward 0, the next episode's first observation), as in both real backends. ``fail_at_step``:
    ``recv`` raises RuntimeError on that (global) step."""

    def __init__(self, lengths: list[int], fail_at_step: int | None = None, recv_delay: float = 0.0) -> None:
        self.num_envs = len(lengths)
        self.observation_shape = (2,)
        self.observation_dtype = np.dtype(np.float32)
        self.action_num = 2
        self.lengths = np.asarray(lengths)
        self.fail_at_step = fail_at_step
        self.recv_delay = recv_delay
        self.steps = 0
        self.closed = False
        self.actions_seen: list[np.ndarray] = []
        self._t = np.zeros(self.num_envs, dtype=np.int64)
        self._ended = np.zeros(self.num_envs, dtype=bool)
        self._pending: np.ndarray | None = None

    def _obs(self) -> np.ndarray:
        return np.stack([np.arange(self.num_envs), self._t], axis=1).astype(np.float32)

    def reset(self, seed: int) -> np.ndarray:
        self._t[:] = 0
        self._ended[:] = False
        return self._obs()

    def send(self, actions: np.ndarray) -> None:
        if self.closed:
            raise RuntimeError('ScriptedVectorEnv: send after close')
        self._pending = np.array(actions)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._pending is None:
            raise RuntimeError('ScriptedVectorEnv: recv without send')
        if self.recv_delay:
            time.sleep(self.recv_delay)
        self.steps += 1
        if self.fail_at_step is not None and self.steps >= self.fail_at_step:
            raise RuntimeError(f'scripted env failure at step {self.steps}')
        self.actions_seen.append(self._pending)
        self._pending = None
        resetting = self._ended.copy()
        reward = np.where(resetting, 0.0, 1.0).astype(np.float32)
        self._t = np.where(resetting, 0, self._t + 1)
        terminated = ~resetting & (self._t >= self.lengths)
        self._ended = terminated
        return self._obs(), reward, terminated, np.zeros(self.num_envs, dtype=bool)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        self.send(actions)
        return self.recv()

    def close(self) -> None:
        self.closed = True


class LinearActorPolicy:
    """A linear softmax policy implementing ``AsyncActorPolicy`` (no learning mode): enough to drive actors."""

    def __init__(
        self, obs_dim: int = 2, action_num: int = 2, fail_in_actor_step: bool = False, numpy: bool = False
    ) -> None:
        self.model = torch.nn.Linear(obs_dim, action_num)
        self.fail_in_actor_step = fail_in_actor_step
        self.numpy = numpy  # offer the actors a numpy chain of the model

    def actor_model(self) -> torch.nn.Module:
        model = copy.deepcopy(self.model)
        model.eval().requires_grad_(False)
        return model

    def actor_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def initial_actor_state(self, batch_size: int) -> Any:
        return None

    def actor_step(
        self, model: torch.nn.Module, obs: torch.Tensor, state: Any, first: torch.Tensor, greedy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        if self.fail_in_actor_step:
            raise ValueError('actor_step failed on purpose')
        logit = model(obs.float())
        action = logit.argmax(-1) if greedy else torch.distributions.Categorical(logits=logit).sample()
        return action, logit, state

    def numpy_actor(self, model: torch.nn.Module, example_obs: np.ndarray) -> NumpyChain | None:
        if not self.numpy:
            return None
        # traced inside a Sequential: fx then sees the Linear as a layer, not as the function it calls
        return NumpyChain.trace(torch.nn.Sequential(model), torch.from_numpy(example_obs.astype(np.float32)))
