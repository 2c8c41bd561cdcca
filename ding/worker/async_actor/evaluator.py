"""Greedy evaluation of the async pipeline's policy on a vectorised env: returns of whole episodes."""

from __future__ import annotations

import numpy as np
import torch

from ding.torch_utils import WeightLoader

from .actor import example_observations
from .protocol import AsyncActorPolicy, VectorEnv


class VectorEvaluator:
    """Plays ``n_episode`` whole episodes greedily on ``env`` (each eval resets every env with ``seed``) and
    keeps the best mean return seen (``best_return``, saved in checkpoints).

    Envs are reset on the step after an episode ends (``protocol``): that step's return is not counted.
    ``max_steps`` bounds one evaluation (an env that never ends cannot hang the run). A policy offering a numpy
    chain of its model (``AsyncActorPolicy.numpy_actor``) acts through it.
    """

    def __init__(
        self,
        env: VectorEnv,
        policy: AsyncActorPolicy,
        n_episode: int,
        seed: int,
        stop_value: float | None = None,
        max_steps: int = 1_000_000,
    ) -> None:
        if n_episode < 1:
            raise ValueError(f'VectorEvaluator: n_episode must be >= 1, got {n_episode}')
        self.env = env
        self.policy = policy
        self.n_episode = n_episode
        self.seed = seed
        self.stop_value = stop_value
        self.max_steps = max_steps
        self.best_return = float('-inf')
        self._model = policy.actor_model()
        self._weights = WeightLoader(self._model)
        self._numpy_actor = policy.numpy_actor(self._model, example_observations(env))  # None: torch acts

    def eval(self, weights: dict[str, torch.Tensor]) -> tuple[bool, dict[str, float]]:
        """``(stop, info)``: whether the mean return reached ``stop_value``, and the returns' mean / std /
        min / max (``eval_episode_return_mean`` ...)."""
        self._weights.load(weights)
        returns = self._play()
        mean = float(np.mean(returns))
        self.best_return = max(self.best_return, mean)
        info = {
            'eval_episode_return_mean': mean,
            'eval_episode_return_std': float(np.std(returns)),
            'eval_episode_return_min': float(np.min(returns)),
            'eval_episode_return_max': float(np.max(returns)),
            'eval_episode_count': float(len(returns)),
        }
        stop = self.stop_value is not None and mean >= self.stop_value
        return stop, info

    def _play(self) -> list[float]:
        env, n = self.env, self.env.num_envs
        obs = env.reset(self.seed)
        first = np.ones(n, dtype=bool)
        ended = np.zeros(n, dtype=bool)
        running = np.zeros(n, dtype=np.float64)
        # Episodes are counted in the order they end; an env's later episodes count too when n_episode > n.
        returns: list[float] = []
        state = self.policy.initial_actor_state(n)
        steps = 0
        while len(returns) < self.n_episode:
            if steps >= self.max_steps:
                raise RuntimeError(
                    f'evaluation: {self.max_steps} steps without {self.n_episode} finished episodes '
                    f'({len(returns)} finished)'
                )
            if self._numpy_actor is not None:
                actions = self._numpy_actor(obs).argmax(axis=-1)
            else:
                with torch.no_grad():
                    action, _, state = self.policy.actor_step(
                        self._model, torch.from_numpy(np.asarray(obs)), state, torch.from_numpy(first), greedy=True
                    )
                actions = action.numpy()
            obs, reward, terminated, truncated = env.step(actions)
            steps += 1
            running += np.where(ended, 0.0, np.asarray(reward, dtype=np.float64))
            now_ended = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
            for i in np.flatnonzero(now_ended):
                returns.append(float(running[i]))
                running[i] = 0.0
            first, ended = ended, now_ended
        return returns[: self.n_episode]

    def close(self) -> None:
        self.env.close()


__all__ = ['VectorEvaluator']
