"""Trajectory assembly on the learner side: the inference server's answered requests, per actor, turned into
what the learner trains on, with episode boundaries.

A request of an actor carries its envs' observations and the reward / end flags of the step that led to
them; the server adds the action it chose. Both backends of ``ding.envs.vector`` reset an env on the step
*after* its episode ended, so a request's ``first`` (the rows whose observation starts an episode) marks the
rows whose previous step was such a reset step: that step carries no transition (``mask`` 0).

- ``UnrollAssembler`` (SEED A2C / IMPALA): ``unroll_len`` steps per actor in the async pipeline's trajectory
  layout (``ding.worker.async_actor.protocol``), queued as ``Unroll``.
- ``TransitionAssembler`` (SEED DQN): the transitions of ``unroll_len`` steps per actor, queued as one
  ``TransitionChunk`` for the learner's replay buffer.

When an actor leaves, its partial chunk is discarded and counted (``discarded_chunks`` / ``discarded_steps``).
Both put into a bounded ``TrajectoryQueue``: a full queue makes the server, and so the actors, wait.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ding.worker.async_actor.queues import TrajectoryQueue
from ding.worker.async_actor.trajectory import ALL, TrajectoryBuffer, Unroll

from .transport import SlotLayout


@dataclass
class TransitionChunk:
    """One actor's transitions of ``unroll_len`` steps: ``obs`` / ``next_obs`` ``[K, *obs]``, ``action`` ``[K]``,
    ``reward`` ``[K]``, ``done`` ``[K]`` (terminated, not truncated: a time limit bootstraps)."""

    obs: np.ndarray
    next_obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    env_steps: int
    actor_id: int
    policy_version: int
    episode_returns: list[float]

    def transitions(self) -> list[dict[str, torch.Tensor]]:
        """One dict per transition, as the replay buffers and DQN's learn mode take them."""
        obs, next_obs = torch.from_numpy(self.obs), torch.from_numpy(self.next_obs)
        action, reward = torch.from_numpy(self.action), torch.from_numpy(self.reward)
        done = torch.from_numpy(self.done)
        return [
            {'obs': obs[i], 'next_obs': next_obs[i], 'action': action[i], 'reward': reward[i], 'done': done[i]}
            for i in range(len(self.action))
        ]


@dataclass
class _Track:
    """What an assembler remembers of one actor between its requests."""

    returns: np.ndarray
    steps: int = 0  # steps in the current chunk
    version: int | None = None  # oldest weights version acting in the current chunk
    previous: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # obs, action, logit of the last request
    finished_returns: list[float] = field(default_factory=list)
    parts: list[dict[str, np.ndarray]] = field(default_factory=list)  # TransitionAssembler's partial chunk
    buffer: TrajectoryBuffer | None = None  # UnrollAssembler's partial unroll


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
        self._observe(track, obs, first)
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

    def _observe(self, track: _Track, obs: np.ndarray, first: np.ndarray) -> None:
        pass

    def _emit(self, actor_id: int, track: _Track, obs: np.ndarray, first: np.ndarray) -> None:
        raise NotImplementedError

    def _take_returns(self, track: _Track) -> list[float]:
        returns, track.finished_returns = track.finished_returns, []
        return returns


class UnrollAssembler(_Assembler):
    """SEED A2C / IMPALA: unrolls of ``unroll_len`` steps of one actor's envs (feed-forward models: no actor
    state). Buffers are recycled once the learner released their unroll."""

    def __init__(self, unroll_len: int, layout: SlotLayout, out: TrajectoryQueue[Unroll]) -> None:
        super().__init__(unroll_len, layout, out)
        self._free: queue.Queue[TrajectoryBuffer] = queue.Queue()

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

    def _observe(self, track: _Track, obs: np.ndarray, first: np.ndarray) -> None:
        if track.buffer is None:
            track.buffer = self._buffer()
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
            torch.from_numpy(action),
            torch.from_numpy(logit),
            reward,
            terminated,
            truncated,
            mask.astype(np.float32),
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
            initial_state=None,
            final_state=None,
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
    """SEED DQN: one actor's transitions of ``unroll_len`` steps, for the learner's replay buffer."""

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
            **{key: np.concatenate([p[key] for p in parts]) for key in ('obs', 'next_obs', 'action', 'reward', 'done')},
            env_steps=env_steps,
            actor_id=actor_id,
            policy_version=track.version,
            episode_returns=self._take_returns(track),
        )
        self.out.put(chunk)  # may wait for the learner (back-pressure); raises QueueClosed when stopping
        self.env_steps += env_steps


__all__ = ['TransitionAssembler', 'TransitionChunk', 'UnrollAssembler']
