"""Trajectory assembly on the learner side: the inference server's answered requests, per actor, turned into
what the learner trains on, with episode boundaries.

A request of an actor carries its envs' observations and the reward / end flags of the step that led to
them; the server adds the action it chose. Both backends of ``ding.envs.vector`` reset an env on the step
*after* its episode ended, so a request's ``first`` (the rows whose observation starts an episode) marks the
rows whose previous step was such a reset step: that step carries no transition (``mask`` 0).

- ``UnrollAssembler`` (SEED A2C / IMPALA): ``unroll_len`` steps per actor in the async pipeline's trajectory
  layout (``ding.worker.async_actor.protocol``), queued as ``Unroll``; with a recurrent model each unroll carries
  the actor state before its first observation (``initial_state``, where the learner's re-run starts).
- ``TransitionAssembler`` (SEED DQN): the transitions of ``unroll_len`` steps per actor, queued as one
  ``TransitionChunk`` for the learner's replay buffer; with ``nstep > 1`` n-step transitions as the serial
  pipeline's ``get_nstep_return_data`` makes them, their windows kept per env across chunks.

When an actor leaves, its partial chunk is discarded and counted (``discarded_chunks`` / ``discarded_steps``;
``TransitionAssembler`` also counts the transitions lost, n-step windows included: ``discarded_transitions``).
Both put into a bounded ``TrajectoryQueue``: a full queue makes the server, and so the actors, wait.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ding.worker.async_actor.actor import copy_state
from ding.worker.async_actor.queues import TrajectoryQueue
from ding.worker.async_actor.trajectory import ALL, TrajectoryBuffer, Unroll

from .transport import SlotLayout

TRANSITION_KEYS = ('obs', 'next_obs', 'action', 'reward', 'done')


@dataclass
class TransitionChunk:
    """One actor's transitions of ``unroll_len`` steps: ``obs`` / ``next_obs`` ``[K, *obs]``, ``action`` ``[K]``,
    ``reward`` ``[K]``, ``done`` ``[K]`` (terminated, not truncated: a time limit bootstraps). n-step
    transitions: ``reward`` ``[K, nstep]`` (zero-padded where an episode ended sooner), ``next_obs`` the
    observation after the window's last step and ``value_gamma`` ``[K]`` (``gamma ** k`` for its ``k`` steps)."""

    obs: np.ndarray
    next_obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    env_steps: int
    actor_id: int
    policy_version: int
    episode_returns: list[float]
    value_gamma: np.ndarray | None = None

    def transitions(self) -> list[dict[str, torch.Tensor]]:
        """One dict per transition, as the replay buffers and DQN's learn mode take them."""
        keys = TRANSITION_KEYS if self.value_gamma is None else (*TRANSITION_KEYS, 'value_gamma')
        columns = {key: torch.from_numpy(getattr(self, key)) for key in keys}
        return [{key: column[i] for key, column in columns.items()} for i in range(len(self.action))]


class NStepWindow:
    """The last ``nstep`` steps of one actor's ``n_envs`` envs, turning each step into the n-step transitions it
    completes: a transition is handed over ``nstep`` steps after it started, or sooner at its episode's end
    (terminated: ``done``, no bootstrap; truncated: bootstraps from the final observation), which is what the
    serial pipeline's ``get_nstep_return_data`` makes of an episode."""

    def __init__(self, nstep: int, gamma: float, n_envs: int, obs_shape: tuple[int, ...]) -> None:
        self.nstep, self.gamma = nstep, gamma
        self.obs = np.zeros((nstep, n_envs, *obs_shape), dtype=np.float32)  # ring buffers, row = step % nstep
        self.action = np.zeros((nstep, n_envs), dtype=np.int64)
        self.reward = np.zeros((nstep, n_envs), dtype=np.float32)
        self.pending = np.zeros(n_envs, dtype=np.int64)  # per env: transitions waiting for later rewards
        self.steps = 0

    def push(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        mask: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """One step of every env (``mask`` False: a reset step, no transition); the transitions it completes."""
        n, t = self.nstep, self.steps
        self.steps += 1
        row = t % n
        self.obs[row], self.action[row], self.reward[row] = obs, action, reward
        self.pending += mask
        ended = mask & (terminated | truncated)
        full = mask & ~ended & (self.pending == n)
        oldest = (t + 1) % n  # the row of step t - n + 1
        order = [(oldest + i) % n for i in range(n)]
        parts = [
            {
                'obs': self.obs[oldest, full],
                'next_obs': next_obs[full],
                'action': self.action[oldest, full],
                'reward': self.reward[order][:, full].T,
                'done': np.zeros(int(full.sum()), dtype=bool),
                'value_gamma': np.full(int(full.sum()), self.gamma**n, dtype=np.float32),
            }
        ]
        self.pending[full] -= 1
        for env in np.flatnonzero(ended):  # every transition of an ended episode is complete
            for k in range(int(self.pending[env]), 0, -1):  # k: steps from the transition's start to the end
                rows = [(t - k + 1 + i) % n for i in range(k)]
                rewards = np.zeros((1, n), dtype=np.float32)
                rewards[0, :k] = self.reward[rows, env]
                parts.append(
                    {
                        'obs': self.obs[rows[0], env][None],
                        'next_obs': next_obs[env][None],
                        'action': self.action[rows[0], env][None],
                        'reward': rewards,
                        'done': terminated[env][None].astype(bool),
                        'value_gamma': np.full(1, self.gamma**k, dtype=np.float32),
                    }
                )
            self.pending[env] = 0
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


@dataclass
class _Track:
    """What an assembler remembers of one actor between its requests."""

    returns: np.ndarray
    steps: int = 0  # steps in the current chunk
    version: int | None = None  # oldest weights version acting in the current chunk
    previous: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # obs, action, logit of the last request
    finished_returns: list[float] = field(default_factory=list)
    parts: list[dict[str, np.ndarray]] = field(default_factory=list)  # TransitionAssembler's partial chunk
    window: NStepWindow | None = None  # TransitionAssembler's n-step windows
    buffer: TrajectoryBuffer | None = None  # UnrollAssembler's partial unroll
    initial_state: Any = None  # UnrollAssembler: the actor state before the partial unroll's first observation


class _Assembler:
    def __init__(self, unroll_len: int, layout: SlotLayout, out: TrajectoryQueue[Any]) -> None:
        self.unroll_len = unroll_len
        self.layout = layout
        self.out = out
        self.env_steps = 0  # env steps of every chunk handed over
        self.discarded_chunks = 0
        self.discarded_steps = 0
        self._tracks: dict[int, _Track] = {}

    def join(self, actor_id: int) -> None:
        self._tracks[actor_id] = _Track(returns=np.zeros(self.layout.n_envs, dtype=np.float64))

    def drop(self, actor_id: int) -> None:
        track = self._tracks.pop(actor_id, None)
        if track is not None and track.steps:
            self.discarded_chunks += 1
            self.discarded_steps += track.steps * self.layout.n_envs
        if track is not None:
            self._release(track)

    def _release(self, track: _Track) -> None:
        pass

    def record(
        self,
        actor_id: int,
        obs: np.ndarray,
        first: np.ndarray,
        reward: np.ndarray,
        ended: tuple[np.ndarray, np.ndarray],
        action: np.ndarray,
        logit: np.ndarray,
        version: int,
    ) -> None:
        """One answered request of ``actor_id``: completes the step its previous request started."""
        track = self._tracks[actor_id]
        if track.previous is not None:
            mask = ~first
            terminated, truncated = ended
            self._step(track, obs, mask, reward, terminated, truncated)
            track.returns += np.where(mask, reward, 0.0)
            done = mask & (terminated | truncated)
            if done.any():
                track.finished_returns.extend(float(r) for r in track.returns[done])
                track.returns[done] = 0.0
            track.steps += 1
            if track.steps == self.unroll_len:
                self._emit(actor_id, track, obs, first)
                track.steps, track.version = 0, None
        track.version = version if track.version is None else min(track.version, version)
        self._observe(actor_id, track, obs, first)
        track.previous = (obs, action, logit)

    def _step(
        self,
        track: _Track,
        next_obs: np.ndarray,
        mask: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        raise NotImplementedError

    def _observe(self, actor_id: int, track: _Track, obs: np.ndarray, first: np.ndarray) -> None:
        pass

    def _emit(self, actor_id: int, track: _Track, obs: np.ndarray, first: np.ndarray) -> None:
        raise NotImplementedError

    def _take_returns(self, track: _Track) -> list[float]:
        returns, track.finished_returns = track.finished_returns, []
        return returns


class UnrollAssembler(_Assembler):
    """SEED A2C / IMPALA: unrolls of ``unroll_len`` steps of one actor's envs. Buffers are recycled once the
    learner released their unroll.

    ``state_before(actor_id)`` (``BatchActing.state_before``) gives the actor state before the observations of
    the actor's request being recorded: an unroll starting there carries it as ``initial_state``, and the one
    ending there as ``final_state``. Without it (or with a feed-forward model) both are None.
    """

    def __init__(
        self,
        unroll_len: int,
        layout: SlotLayout,
        out: TrajectoryQueue[Unroll],
        state_before: Callable[[int], Any] | None = None,
    ) -> None:
        super().__init__(unroll_len, layout, out)
        self._state_before = state_before
        self._free: queue.Queue[TrajectoryBuffer] = queue.Queue()

    def _actor_state(self, actor_id: int) -> Any:
        return None if self._state_before is None else copy_state(self._state_before(actor_id))

    def _buffer(self) -> TrajectoryBuffer:
        try:
            return self._free.get_nowait()
        except queue.Empty:
            layout = self.layout
            return TrajectoryBuffer(
                self.unroll_len, layout.n_envs, layout.obs_shape, np.dtype(np.float32), layout.action_num
            )

    def _release(self, track: _Track) -> None:
        if track.buffer is not None:
            self._free.put(track.buffer)
            track.buffer = None

    def _observe(self, actor_id: int, track: _Track, obs: np.ndarray, first: np.ndarray) -> None:
        if track.buffer is None:
            track.buffer = self._buffer()
            track.initial_state = self._actor_state(actor_id)
        track.buffer.write_obs(track.steps, obs, first, ALL)

    def _step(
        self,
        track: _Track,
        next_obs: np.ndarray,
        mask: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        assert track.buffer is not None and track.previous is not None
        _, action, logit = track.previous
        track.buffer.write_step(
            track.steps,
            action,
            logit,
            reward,
            terminated,
            truncated,
            mask,
            ALL,
        )

    def _emit(self, actor_id: int, track: _Track, obs: np.ndarray, first: np.ndarray) -> None:
        buffer = track.buffer
        assert buffer is not None and track.version is not None
        buffer.write_obs(self.unroll_len, obs, first, ALL)  # the bootstrap observation
        track.buffer = None
        env_steps = self.unroll_len * self.layout.n_envs
        unroll = Unroll(
            tensors=buffer.tensors,
            initial_state=track.initial_state,
            final_state=self._actor_state(actor_id),
            policy_version=track.version,
            env_steps=env_steps,
            actor_id=actor_id,
            episode_returns=self._take_returns(track),
            buffer=buffer,
            pool=self._free,
        )
        self.out.put(unroll)  # may wait for the learner (back-pressure); raises QueueClosed when stopping
        self.env_steps += env_steps


class TransitionAssembler(_Assembler):
    """SEED DQN: one actor's transitions of ``unroll_len`` steps, for the learner's replay buffer; n-step
    transitions (``nstep > 1``, discount ``gamma``) as ``NStepWindow`` makes them."""

    def __init__(
        self, unroll_len: int, layout: SlotLayout, out: TrajectoryQueue[Any], nstep: int = 1, gamma: float = 0.97
    ) -> None:
        if nstep < 1:
            raise ValueError(f'TransitionAssembler: nstep must be >= 1, got {nstep}')
        super().__init__(unroll_len, layout, out)
        self.nstep, self.gamma = nstep, gamma
        self.discarded_transitions = 0

    def drop(self, actor_id: int) -> None:
        track = self._tracks.get(actor_id)
        if track is not None:
            self.discarded_transitions += sum(len(p['action']) for p in track.parts)
            if track.window is not None:
                self.discarded_transitions += int(track.window.pending.sum())
        super().drop(actor_id)

    def _step(
        self,
        track: _Track,
        next_obs: np.ndarray,
        mask: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        assert track.previous is not None
        obs, action, _ = track.previous
        if self.nstep > 1:
            if track.window is None:
                track.window = NStepWindow(self.nstep, self.gamma, self.layout.n_envs, self.layout.obs_shape)
            track.parts.append(track.window.push(obs, action, reward, mask, next_obs, terminated, truncated))
            return
        track.parts.append(
            {
                'obs': obs[mask],
                'next_obs': next_obs[mask],
                'action': action[mask],
                'reward': reward[mask],
                'done': terminated[mask],
            }
        )

    def _emit(self, actor_id: int, track: _Track, obs: np.ndarray, first: np.ndarray) -> None:
        assert track.version is not None
        parts, track.parts = track.parts, []
        env_steps = self.unroll_len * self.layout.n_envs
        chunk = TransitionChunk(
            **{key: np.concatenate([p[key] for p in parts]) for key in parts[0]},
            env_steps=env_steps,
            actor_id=actor_id,
            policy_version=track.version,
            episode_returns=self._take_returns(track),
        )
        self.out.put(chunk)  # may wait for the learner (back-pressure); raises QueueClosed when stopping
        self.env_steps += env_steps


__all__ = ['NStepWindow', 'TransitionAssembler', 'TransitionChunk', 'UnrollAssembler']
