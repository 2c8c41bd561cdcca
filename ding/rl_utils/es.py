"""Evolution-strategies maths: the shared Gaussian noise table, centred-rank shaping, the gradient estimate.

Numpy only: the learner and every worker process compute the same numbers from the same ``(seed, size)``, and the
learner's Adam step needs no autograd.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Rows of noise summed at once by ``es_gradient``: bounds the temporary (rows * dim floats) for large models.
_GRADIENT_CHUNK_ROWS = 256


class NoiseTable:
    """A float32 table of ``size`` standard-normal draws from ``numpy.random.default_rng(seed)``.

    Identical on every process for the same ``(seed, size)``; a perturbation of a ``dim``-parameter model is the
    slice ``[noise_id, noise_id + dim)``, so a worker and the learner exchange only the integer ``noise_id``.
    """

    def __init__(self, seed: int, size: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f'NoiseTable: seed must be a non-negative int, got {seed!r}')
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f'NoiseTable: size must be a positive int, got {size!r}')
        self.seed, self.size = int(seed), int(size)
        self.noise = np.random.default_rng(self.seed).standard_normal(self.size, dtype=np.float32)
        self.noise.flags.writeable = False  # slices are handed out as views: nobody may change the table

    def max_noise_id(self, dim: int) -> int:
        """The largest valid ``noise_id`` for a ``dim``-long slice."""
        if dim < 1 or dim > self.size:
            raise ValueError(f'NoiseTable: a {dim}-parameter model does not fit a table of {self.size} floats')
        return self.size - dim

    def get(self, noise_id: int, dim: int) -> np.ndarray:
        """The (read-only) perturbation ``noise[noise_id : noise_id + dim]``."""
        if not 0 <= noise_id <= self.max_noise_id(dim):
            raise ValueError(f'NoiseTable: noise_id {noise_id} out of range [0, {self.max_noise_id(dim)}] (dim {dim})')
        return self.noise[noise_id : noise_id + dim]

    def sample_id(self, rng: np.random.Generator, dim: int) -> int:
        """A uniformly drawn valid ``noise_id``."""
        return int(rng.integers(0, self.max_noise_id(dim) + 1))


def centred_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks of ``values`` scaled to [-0.5, 0.5] (float32, same shape); tied values share their mean rank.

    Sharing ranks matters for returns that tie often (CartPole's capped 200): a tied antithetic pair then
    weighs exactly 0 instead of a random +-1/(N-1).
    """
    flat = np.asarray(values, dtype=np.float64).ravel()
    n = flat.size
    if n < 2:
        return np.zeros(np.shape(values), dtype=np.float32)
    order = np.argsort(flat, kind='stable')
    sorted_values = flat[order]
    # each run of equal values gets the mean of the positions it spans
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], n]
    mean_rank = np.repeat((starts + ends - 1) / 2.0, ends - starts)
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = mean_rank
    return (ranks / (n - 1) - 0.5).astype(np.float32).reshape(np.shape(values))


def es_gradient(
    table: NoiseTable, noise_ids: np.ndarray, weights: np.ndarray, dim: int, sigma: float, episodes: int
) -> np.ndarray:
    """The ascent direction ``sum_i weights[i] * eps_i / (episodes * sigma)`` (float32, length ``dim``).

    ``eps_i`` is ``table.get(noise_ids[i], dim)``; ``episodes`` is the number of returns behind the weights
    (two per antithetic pair).
    """
    if len(noise_ids) != len(weights):
        raise ValueError(f'es_gradient: {len(noise_ids)} noise ids but {len(weights)} weights')
    if episodes < 1 or sigma <= 0:
        raise ValueError(f'es_gradient: episodes must be >= 1 and sigma > 0, got {episodes}, {sigma}')
    total = np.zeros(dim, dtype=np.float64)
    for start in range(0, len(noise_ids), _GRADIENT_CHUNK_ROWS):
        ids = noise_ids[start : start + _GRADIENT_CHUNK_ROWS]
        rows = np.stack([table.get(int(i), dim) for i in ids])
        total += np.asarray(weights[start : start + _GRADIENT_CHUNK_ROWS], dtype=np.float64) @ rows
    return (total / (episodes * sigma)).astype(np.float32)


class AdamState:
    """Adam on one flat float32 vector, with L2 weight decay added to the gradient (as ``torch.optim.Adam``'s
    ``weight_decay``). Plain numpy: the ES parameters never see autograd, and ``torch.optim``'s first use imports
    torch's compiler stack, seconds at the start of every learner."""

    def __init__(
        self, dim: int, learning_rate: float, betas: tuple[float, float], eps: float, weight_decay: float
    ) -> None:
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f'policy.learn.betas: expected two numbers in [0, 1), got {betas!r}')
        self.learning_rate, self.betas, self.eps, self.weight_decay = learning_rate, betas, eps, weight_decay
        self.exp_avg = np.zeros(dim, dtype=np.float32)
        self.exp_avg_sq = np.zeros(dim, dtype=np.float32)
        self.steps = 0

    def step(self, theta: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        """New parameters one step along the ascent direction ``gradient`` (a new array; ``theta`` is kept)."""
        beta1, beta2 = self.betas
        descent = self.weight_decay * theta - gradient  # Adam minimises: the negated ascent plus the L2 term
        self.steps += 1
        self.exp_avg = beta1 * self.exp_avg + (1.0 - beta1) * descent
        self.exp_avg_sq = beta2 * self.exp_avg_sq + (1.0 - beta2) * np.square(descent)
        m_hat = self.exp_avg / (1.0 - beta1**self.steps)
        v_hat = self.exp_avg_sq / (1.0 - beta2**self.steps)
        return (theta - self.learning_rate * m_hat / (np.sqrt(v_hat) + self.eps)).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """Copies of the moments and the step count (the policy turns them into tensors for checkpoints)."""
        return {'exp_avg': self.exp_avg.copy(), 'exp_avg_sq': self.exp_avg_sq.copy(), 'step': self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        exp_avg = np.asarray(state['exp_avg'], dtype=np.float32)
        exp_avg_sq = np.asarray(state['exp_avg_sq'], dtype=np.float32)
        if exp_avg.shape != self.exp_avg.shape or exp_avg_sq.shape != self.exp_avg_sq.shape:
            raise ValueError(
                f'ES optimizer state: moments of shape {exp_avg.shape}, the model has {self.exp_avg.shape}'
            )
        self.exp_avg, self.exp_avg_sq, self.steps = exp_avg.copy(), exp_avg_sq.copy(), int(state['step'])
