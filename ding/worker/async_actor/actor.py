"""An actor thread: steps its vectorised env(s) with batched inference and queues one unroll per env group
and cycle, taking the newest weights from the staging queue at the start of every cycle."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .protocol import AsyncActorPolicy, VectorEnv
from .queues import QueueClosed, StagingQueue, TrajectoryQueue
from .trajectory import TrajectoryBuffer, Unroll


def copy_state(state: Any) -> Any:
    """A copy of an actor state (None, a tensor or a tuple of tensors) that later steps cannot change."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return state.clone()
    return tuple(s.clone() for s in state)


class EnvGroup:
    """One vectorised env and what an actor tracks for it between steps: the current observation, which envs
    start an episode, which ended on the previous step, the actor state, and episode returns so far."""

    def __init__(self, env: VectorEnv, policy: AsyncActorPolicy, seed: int, allocate_per_step: bool = False) -> None:
        self.env = env
        self.policy = policy
        self.num_envs = env.num_envs
        self.allocate_per_step = allocate_per_step
        self.obs = env.reset(seed)
        self.first = np.ones(self.num_envs, dtype=bool)
        self.ended = np.zeros(self.num_envs, dtype=bool)
        self.state = policy.initial_actor_state(self.num_envs)
        self._returns = np.zeros(self.num_envs, dtype=np.float64)
        self.finished_returns: list[float] = []
        self.pool: queue.Queue[TrajectoryBuffer] = queue.Queue()
        self.buffer: TrajectoryBuffer | None = None
        self.initial_state: Any = None
        self._action: torch.Tensor | None = None
        self._logit: torch.Tensor | None = None

    def new_buffer(self, unroll_len: int) -> TrajectoryBuffer:
        return TrajectoryBuffer(
            unroll_len,
            self.num_envs,
            self.env.observation_shape,
            self.env.observation_dtype,
            self.env.action_num,
            allocate_per_step=self.allocate_per_step,
        )

    def start_unroll(self, unroll_len: int) -> None:
        """Take a free buffer (a new one only while every buffer is still queued or being batched)."""
        try:
            self.buffer = self.pool.get_nowait()
        except queue.Empty:
            self.buffer = self.new_buffer(unroll_len)
        self.initial_state = copy_state(self.state)

    def begin_step(self, t: int, model: torch.nn.Module) -> None:
        """Record ``obs[t]``, run inference for it and start the env step (returns while the envs step)."""
        buffer = self.buffer
        assert buffer is not None
        obs = buffer.write_obs(t, self.obs, self.first)
        with torch.no_grad():
            action, logit, self.state = self.policy.actor_step(model, obs, self.state, torch.from_numpy(self.first))
        self._action, self._logit = action, logit
        self.env.send(action.numpy())

    def end_step(self, t: int) -> None:
        """Wait for the env step started by :meth:`begin_step` and record what it did."""
        buffer = self.buffer
        assert buffer is not None and self._action is not None and self._logit is not None
        obs, reward, terminated, truncated = self.env.recv()
        reward = np.asarray(reward, dtype=np.float32)
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        # A step right after an episode ended is the env's reset step: no transition, and its observation
        # is the first one of the next episode.
        buffer.write_step(t, self._action, self._logit, reward, terminated, truncated, (~self.ended).astype(np.float32))
        self._returns += reward
        ended = terminated | truncated
        if ended.any():
            self.finished_returns.extend(float(r) for r in self._returns[ended])
            self._returns[ended] = 0.0
        self.first = self.ended
        self.ended = ended
        self.obs = obs

    def finish_unroll(self, unroll_len: int, version: int, actor_id: int) -> Unroll:
        buffer = self.buffer
        assert buffer is not None
        buffer.write_obs(unroll_len, self.obs, self.first)
        buffer.finish()
        returns, self.finished_returns = self.finished_returns, []
        unroll = Unroll(
            tensors=buffer.tensors,
            initial_state=self.initial_state,
            final_state=copy_state(self.state),
            policy_version=version,
            env_steps=unroll_len * self.num_envs,
            actor_id=actor_id,
            episode_returns=returns,
            buffer=None if self.allocate_per_step else buffer,
            pool=None if self.allocate_per_step else self.pool,
        )
        self.buffer = None
        return unroll

    def close(self) -> None:
        self.env.close()


def run_cycle(groups: Sequence[EnvGroup], model: torch.nn.Module, unroll_len: int) -> None:
    """``unroll_len`` steps of every group. With two groups, one group's envs step while the other's
    inference runs (double buffering); one group steps and infers in turn."""
    for group in groups:
        group.start_unroll(unroll_len)
    if len(groups) == 1:
        only = groups[0]
        for t in range(unroll_len):
            only.begin_step(t, model)
            only.end_step(t)
        return
    a, b = groups
    a.begin_step(0, model)
    for t in range(unroll_len):
        b.begin_step(t, model)  # a's envs step meanwhile
        a.end_step(t)
        if t + 1 < unroll_len:
            a.begin_step(t + 1, model)  # b's envs step meanwhile
        b.end_step(t)


class ActorThread(threading.Thread):
    """Runs actor cycles until ``stop()`` or a queue closes; an exception ends the thread, is kept in
    ``error`` and reported to ``on_error`` (which stops the pipeline), never swallowed."""

    def __init__(
        self,
        actor_id: int,
        policy: AsyncActorPolicy,
        envs: Sequence[VectorEnv],
        seed: int,
        unroll_len: int,
        staging: StagingQueue,
        trajectories: TrajectoryQueue[Unroll],
        on_error: Callable[[ActorThread, BaseException], None] | None = None,
        allocate_per_step: bool = False,
    ) -> None:
        super().__init__(name=f'ding-actor-{actor_id}', daemon=True)
        self.actor_id = actor_id
        self.policy = policy
        self.unroll_len = unroll_len
        self.staging = staging
        self.trajectories = trajectories
        self.on_error = on_error
        self.error: BaseException | None = None
        self.cycles = 0
        self.version: int | None = None
        self._envs = list(envs)
        self._seed = seed
        self._allocate_per_step = allocate_per_step
        self._stop_event = threading.Event()

    def stop(self) -> None:
        """Leave the loop after the current step (a thread waiting on a queue needs the queue closed)."""
        self._stop_event.set()

    def run(self) -> None:
        groups: list[EnvGroup] = []
        try:
            model = self.policy.actor_model()
            for i, env in enumerate(self._envs):
                groups.append(EnvGroup(env, self.policy, self._seed + i * env.num_envs, self._allocate_per_step))
            while not self._stop_event.is_set():
                self._take_newest_weights(model)
                if self.version is None:  # stopped before the first weights came
                    break
                run_cycle(groups, model, self.unroll_len)
                for group in groups:
                    unroll = group.finish_unroll(self.unroll_len, self.version, self.actor_id)
                    if not self.trajectories.put(unroll):
                        unroll.release()  # dropped (counted by the queue): its buffer is free again
                self.cycles += 1
        except QueueClosed:
            pass
        except BaseException as exc:
            self.error = exc
            if self.on_error is not None:
                self.on_error(self, exc)
        finally:
            try:
                self.close_envs()
            except Exception as exc:
                if self.error is None:
                    self.error = exc
                    if self.on_error is not None:
                        self.on_error(self, exc)

    def close_envs(self) -> None:
        """Close this actor's envs (once; the thread does it when it ends)."""
        envs, self._envs = self._envs, []
        errors = []
        for env in envs:
            try:
                env.close()
            except Exception as exc:  # close the others first
                errors.append(exc)
        if errors:
            raise errors[0]

    def _take_newest_weights(self, model: torch.nn.Module) -> None:
        while True:
            # Only an actor without weights waits; it checks for stop every half second meanwhile.
            newest = self.staging.newest(self.version, timeout=0.5 if self.version is None else None)
            if newest is not None:
                version, weights = newest
                model.load_state_dict(weights)
                self.version = version
                return
            if self.version is not None or self._stop_event.is_set():
                return


__all__ = ['ActorThread', 'EnvGroup', 'run_cycle', 'copy_state']
