"""An actor thread: steps its vectorised env(s) with batched inference and queues one unroll per env group
and cycle, taking the newest weights from the staging queue at the start of every cycle."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ding.torch_utils import WeightLoader
from ding.torch_utils.numpy_chain import NumpyChain

from .protocol import AsyncActorPolicy, VectorEnv
from .queues import QueueClosed, StagingQueue, TrajectoryQueue
from .trajectory import TrajectoryBuffer, Unroll, join_states


def copy_state(state: Any) -> Any:
    """A copy of an actor state (None, a tensor or a tuple of tensors) that later steps cannot change."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return state.clone()
    return tuple(s.clone() for s in state)


def example_observations(env: VectorEnv, count: int = 8) -> np.ndarray:
    """Random observations of ``env``'s shape and dtype (to check a numpy actor against the model)."""
    values = np.random.default_rng(0).normal(size=(count, *env.observation_shape))
    if np.issubdtype(env.observation_dtype, np.integer):
        values = np.abs(values) * 50
    return values.astype(env.observation_dtype)


class EnvGroup:
    """One vectorised env and what an actor tracks for it between steps: the current observation, which envs
    start an episode, which ended on the previous step, the actor state, and episode returns so far. It writes
    into columns ``cols`` of the actor's trajectory buffer.

    With a ``numpy_actor`` (the policy's logits as a ``NumpyChain``, see ``AsyncActorPolicy.numpy_actor``) the
    logits are computed in numpy straight into the trajectory buffer and actions sampled with ``rng`` (seeded
    with ``seed``; Gumbel max); otherwise ``policy.actor_step`` runs the torch model.
    """

    def __init__(
        self,
        env: VectorEnv,
        policy: AsyncActorPolicy,
        seed: int,
        numpy_actor: NumpyChain | None = None,
    ) -> None:
        self.env = env
        self.policy = policy
        self.numpy_actor = numpy_actor
        self.rng = np.random.default_rng(seed)  # the numpy actor's sampling
        self.num_envs = env.num_envs
        self.cols = slice(0, env.num_envs)
        self.obs = env.reset(seed)
        self.first = np.ones(self.num_envs, dtype=bool)
        self.ended = np.zeros(self.num_envs, dtype=bool)
        self.state = policy.initial_actor_state(self.num_envs)
        self._returns = np.zeros(self.num_envs, dtype=np.float64)
        self.finished_returns: list[float] = []
        self.buffer: TrajectoryBuffer | None = None
        self.initial_state: Any = None
        self._action: np.ndarray | None = None
        self._logit: np.ndarray | None = None  # None once written into the buffer by the numpy actor

    def start_unroll(self, buffer: TrajectoryBuffer) -> None:
        self.buffer = buffer
        self.initial_state = copy_state(self.state)

    def begin_step(self, t: int, model: torch.nn.Module) -> None:
        """Record ``obs[t]``, run inference for it and start the env step (returns while the envs step)."""
        buffer = self.buffer
        assert buffer is not None
        obs = buffer.write_obs(t, self.obs, self.first, self.cols)
        if self.numpy_actor is not None:
            logit = self.numpy_actor(obs, out=buffer.logit_out(t, self.cols))
            # Gumbel-max: argmax(logit + Gumbel noise) is a sample from softmax(logit).
            noisy = self.rng.gumbel(size=logit.shape)
            noisy += logit
            self._action, self._logit = noisy.argmax(axis=-1), None
        else:
            with torch.no_grad():
                action, logit, self.state = self.policy.actor_step(
                    model, torch.from_numpy(obs), self.state, torch.from_numpy(self.first)
                )
            self._action, self._logit = action.numpy(), logit.numpy()
        self.env.send(self._action)

    def end_step(self, t: int) -> None:
        """Wait for the env step started by :meth:`begin_step` and record what it did."""
        buffer = self.buffer
        assert buffer is not None and self._action is not None
        obs, reward, terminated, truncated = self.env.recv()
        ended = terminated | truncated
        # A step right after an episode ended is the env's reset step: no transition, and its observation
        # is the first one of the next episode.
        buffer.write_step(t, self._action, self._logit, reward, terminated, truncated, ~self.ended, self.cols)
        self._returns += reward
        if ended.any():
            self.finished_returns.extend(self._returns[ended].tolist())
            self._returns[ended] = 0.0
        self.first = self.ended
        self.ended = ended
        self.obs = obs

    def finish_unroll(self, unroll_len: int) -> None:
        """Record the bootstrap observation ``obs[unroll_len]``."""
        assert self.buffer is not None
        self.buffer.write_obs(unroll_len, self.obs, self.first, self.cols)
        self.buffer = None

    def close(self) -> None:
        self.env.close()


def run_cycle(groups: Sequence[EnvGroup], model: torch.nn.Module, unroll_len: int) -> None:
    """``unroll_len`` steps of every group. With two groups, one group's envs step while the other's
    inference runs (double buffering); one group steps and infers in turn."""
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


class UnrollWriter:
    """An actor's env groups writing one unroll per cycle (all groups side by side on the env dim) into a
    trajectory buffer that is reused once the learner has released it; a new buffer is made only while every
    buffer is still queued or being batched."""

    def __init__(self, groups: Sequence[EnvGroup], unroll_len: int, allocate_per_step: bool = False) -> None:
        if not groups:
            raise ValueError('UnrollWriter: no env groups')
        self.groups = list(groups)
        self.unroll_len = unroll_len
        self.allocate_per_step = allocate_per_step
        self.pool: queue.Queue[TrajectoryBuffer] = queue.Queue()
        self.buffers_made = 0
        start = 0
        for group in self.groups:
            group.cols = slice(start, start + group.num_envs)
            start += group.num_envs
        self.num_envs = start

    def _buffer(self) -> TrajectoryBuffer:
        try:
            return self.pool.get_nowait()
        except queue.Empty:
            env = self.groups[0].env
            self.buffers_made += 1
            return TrajectoryBuffer(
                self.unroll_len,
                self.num_envs,
                env.observation_shape,
                env.observation_dtype,
                env.action_num,
                allocate_per_step=self.allocate_per_step,
            )

    def collect(self, model: torch.nn.Module, version: int, actor_id: int = 0) -> Unroll:
        """One cycle of every group with ``model`` (weights of ``version``), as one unroll."""
        buffer = self._buffer()
        for group in self.groups:
            group.start_unroll(buffer)
        run_cycle(self.groups, model, self.unroll_len)
        returns: list[float] = []
        for group in self.groups:
            group.finish_unroll(self.unroll_len)
            returns.extend(group.finished_returns)
            group.finished_returns = []
        buffer.finish()
        recycle = not self.allocate_per_step
        return Unroll(
            tensors=buffer.tensors,
            initial_state=join_states([g.initial_state for g in self.groups]),
            final_state=join_states([copy_state(g.state) for g in self.groups]),
            policy_version=version,
            env_steps=self.unroll_len * self.num_envs,
            actor_id=actor_id,
            episode_returns=returns,
            buffer=buffer if recycle else None,
            pool=self.pool if recycle else None,
        )


class ActorThread(threading.Thread):
    """Runs actor cycles until ``stop()`` or a queue closes; an exception ends the thread, is kept in
    ``error`` and reported to ``on_error`` (which stops the pipeline), never swallowed. With
    ``numpy_inference`` the actor computes the logits in numpy when the policy can (``numpy_actor``)."""

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
        numpy_inference: bool = True,
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
        self.model = policy.actor_model()
        self._weights = WeightLoader(self.model)
        # The numpy chain this actor acts through (None: the torch model acts).
        self.numpy_actor: NumpyChain | None = None
        if numpy_inference and envs:
            self.numpy_actor = policy.numpy_actor(self.model, example_observations(envs[0]))
        self._envs = list(envs)
        self._seed = seed
        self._allocate_per_step = allocate_per_step
        self._stop_event = threading.Event()

    def stop(self) -> None:
        """Leave the loop after the current cycle (a thread waiting on a queue needs the queue closed too)."""
        self._stop_event.set()

    def run(self) -> None:
        try:
            model = self.model
            groups, seed = [], self._seed
            for env in self._envs:
                groups.append(EnvGroup(env, self.policy, seed, self.numpy_actor))
                seed += env.num_envs
            writer = UnrollWriter(groups, self.unroll_len, self._allocate_per_step)
            while not self._stop_event.is_set():
                self._take_newest_weights()
                if self.version is None:  # stopped before the first weights came
                    break
                unroll = writer.collect(model, self.version, self.actor_id)
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

    def _take_newest_weights(self) -> None:
        while True:
            # Only an actor without weights waits; it checks for stop every half second meanwhile.
            newest = self.staging.newest(self.version, timeout=0.5 if self.version is None else None)
            if newest is not None:
                version, weights = newest
                self._weights.load(weights)
                self.version = version
                return
            if self.version is not None or self._stop_event.is_set():
                return


__all__ = ['ActorThread', 'EnvGroup', 'UnrollWriter', 'run_cycle', 'copy_state']
