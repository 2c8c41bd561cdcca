"""The actor threads of one run, their queues, and stopping them all (on success, error or interrupt)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .actor import ActorThread
from .config import AsyncActorSettings
from .protocol import AsyncActorPolicy, VectorEnv
from .queues import StagingQueue, TrajectoryQueue
from .trajectory import Unroll

# make_env(num_envs, seed) -> a VectorEnv of num_envs envs (e.g. ding.envs.vector.make_vector_env with the run's
# env config bound).
EnvFactory = Callable[[int, int], VectorEnv]


class ActorError(RuntimeError):
    """An actor thread failed; ``__cause__`` is its exception, with the actor's traceback."""


class ActorPool:
    """``settings.actor_num`` actor threads sharing one trajectory queue and one staging queue.

    Envs are made here, before any thread starts, so a bad env config fails in the caller's thread.
    ``check()`` re-raises the first actor failure in the caller's thread; ``stop()`` ends every thread,
    closes the queues and every env, and is safe to call twice.
    """

    def __init__(
        self,
        policy: AsyncActorPolicy,
        settings: AsyncActorSettings,
        make_env: EnvFactory,
        seed: int,
        allocate_per_step: bool = False,
    ) -> None:
        self.settings = settings
        self.staging = StagingQueue(settings.staging_queue_size)
        self.trajectories: TrajectoryQueue[Unroll] = TrajectoryQueue(
            settings.trajectory_queue_size, settings.drop_when_full
        )
        self.failure = threading.Event()
        self._error: tuple[ActorThread, BaseException] | None = None
        self._lock = threading.Lock()
        self.threads: list[ActorThread] = []
        envs: list[VectorEnv] = []
        try:
            for actor_id in range(settings.actor_num):
                actor_envs = []
                for group in range(settings.env_groups):
                    group_seed = seed + (actor_id * settings.env_groups + group) * settings.envs_per_group
                    env = make_env(settings.envs_per_group, group_seed)
                    envs.append(env)
                    actor_envs.append(env)
                self.threads.append(
                    ActorThread(
                        actor_id,
                        policy,
                        actor_envs,
                        seed + actor_id * settings.env_per_actor,
                        settings.unroll_len,
                        self.staging,
                        self.trajectories,
                        on_error=self._on_error,
                        allocate_per_step=allocate_per_step,
                        numpy_inference=settings.numpy_inference,
                    )
                )
        except BaseException:
            for env in envs:
                env.close()
            raise
        self._started = False
        self._stopped = False

    def start(self) -> None:
        """Start the threads; they wait for the first weights on the staging queue."""
        self._started = True
        for thread in self.threads:
            thread.start()

    def _on_error(self, thread: ActorThread, exc: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = (thread, exc)
        self.failure.set()
        # Wake the learner (waiting for trajectories) and every other actor.
        self.trajectories.close()
        self.staging.close()

    def check(self) -> None:
        """Raise :class:`ActorError` (caused by the actor's exception) when an actor thread failed."""
        if self._error is not None:
            thread, exc = self._error
            raise ActorError(f'actor thread {thread.name} failed: {type(exc).__name__}: {exc}') from exc

    def inference_engine(self) -> str:
        """'numpy' when every started actor acts through a numpy chain, 'torch' when none does, else 'mixed'."""
        engines = {'torch' if t.numpy_actor is None else 'numpy' for t in self.threads}
        return engines.pop() if len(engines) == 1 else 'mixed'

    def alive(self) -> list[ActorThread]:
        return [t for t in self.threads if t.is_alive()]

    def stop(self, timeout: float = 30.0) -> list[ActorThread]:
        """Stop and join every thread (each closes its envs); release queued buffers. Returns the threads
        still alive after ``timeout`` seconds (none unless an env hangs)."""
        if self._stopped:
            return self.alive()
        self._stopped = True
        for thread in self.threads:
            thread.stop()
        self.trajectories.close()
        self.staging.close()
        for unroll in self.trajectories.drain():
            unroll.release()
        if not self._started:  # the threads own the envs once started; before that, close them here
            for thread in self.threads:
                thread.close_envs()
            return []
        end = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, end - time.monotonic()))
        return self.alive()

    def info(self) -> dict[str, Any]:
        return {
            'trajectory_queue': self.trajectories.qsize(),
            'dropped_trajectories': self.trajectories.dropped,
            'actor_cycles': sum(t.cycles for t in self.threads),
        }


__all__ = ['ActorPool', 'ActorError', 'EnvFactory']
