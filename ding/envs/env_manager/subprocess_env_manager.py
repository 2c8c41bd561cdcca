"""Env manager with one worker process per env: actions and small results go through pipes, observations
through per-env shared memory, and dead or hung workers are replaced."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from typing import Any, cast

import numpy as np

from ding.envs.env.base_env import BaseEnv, BaseEnvTimestep
from ding.envs.env.ding_env_wrapper import DingEnvWrapper
from ding.utils import ENV_MANAGER_REGISTRY

from .base_env_manager import BaseEnvManager, EnvState, abnormal_timestep
from .env_worker import env_worker

_DEFAULT_CONTEXT = 'fork' if sys.platform.startswith('linux') else 'spawn'
_CLOSE_TIMEOUT = 2.0  # seconds close() waits for workers to exit by themselves before killing them
_STOP_TIMEOUT = 1.0  # the same for one worker being replaced


class EnvWorkerError(RuntimeError):
    """An exception raised inside a worker, carried back as its repr."""

    def __init__(self, child_repr: str) -> None:
        super().__init__(child_repr)
        self.child_repr = child_repr

    def __repr__(self) -> str:
        return self.child_repr


@ENV_MANAGER_REGISTRY.register('subprocess')
class SubprocessEnvManager(BaseEnvManager):
    """Runs each env in its own process (same interface as ``BaseEnvManager``; ``step`` waits for every env it
    was given). A worker whose env raises, which dies, or which exceeds ``step_timeout`` / ``reset_timeout``
    is replaced by a new worker (new env from its env_fn, reset); that step reports ``info['abnormal']``.

    Extra config keys: ``step_timeout`` / ``reset_timeout`` (seconds, None: wait as long as the worker lives),
    ``shared_memory`` (pass observations through shared memory when they are fixed-shape arrays),
    ``context`` ('fork' on Linux, else 'spawn'; with 'spawn' each env_fn must be picklable).
    """

    config = dict(
        BaseEnvManager.config,
        step_timeout=None,
        shared_memory=True,
        context=_DEFAULT_CONTEXT,
    )

    def __init__(self, env_fn: Sequence[Callable[[], BaseEnv]], cfg: dict | None = None) -> None:
        super().__init__(env_fn, cfg)
        self._step_timeout = self._cfg.step_timeout
        self._shared_memory = bool(self._cfg.shared_memory)
        try:
            self._ctx = mp.get_context(self._cfg.context)
        except ValueError as e:
            raise ValueError(f"subprocess env manager config 'context': {e}") from e
        n = self._env_num
        self._procs: list[Any] = [None] * n
        self._conns: list[Any] = [None] * n
        self._shm: list[Any] = [None] * n
        self._views: list[np.ndarray | None] = [None] * n
        self._obs_spec: tuple[tuple, np.dtype] | None = None
        self._hung: set = set()

    # ---- workers ------------------------------------------------------------------------------------------------
    @property
    def worker_pids(self) -> dict[int, int]:
        """``{env_id: pid}`` of the live worker processes."""
        return {i: p.pid for i, p in enumerate(self._procs) if p is not None}

    def _reference_env(self) -> BaseEnv:
        if self._env_ref is None:
            self._env_ref = self._env_fn[0]()
        return self._env_ref

    def _find_obs_spec(self) -> tuple[tuple, np.dtype] | None:
        ref = self._reference_env()
        space = ref.observation_space
        shape, dtype = getattr(space, 'shape', None), getattr(space, 'dtype', None)
        if shape is None or dtype is None:
            return None
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            return None
        if isinstance(ref, DingEnvWrapper):
            handed = ref.observation_dtype  # the wrapper converts (float32; uint8 frames of the gymnasium type)
            if handed is None:
                return None
            dtype = handed
        return tuple(shape), dtype

    def _create_envs(self) -> None:
        if self._shared_memory and self._obs_spec is None:
            self._obs_spec = self._find_obs_spec()
        for i in range(self._env_num):
            self._start_worker(i)
            self._env_states[i] = EnvState.INIT

    def _start_worker(self, env_id: int) -> None:
        ctx = self._ctx
        shape = dtype_str = None
        if self._obs_spec is not None:
            shape, dtype = self._obs_spec
            if self._shm[env_id] is None:
                count = 2 * int(np.prod(shape))
                self._shm[env_id] = ctx.RawArray(ctypes.c_uint8, count * dtype.itemsize)
                self._views[env_id] = np.frombuffer(self._shm[env_id], dtype=dtype, count=count).reshape((2,) + shape)
            dtype_str = dtype.str
        parent_conn, child_conn = ctx.Pipe()
        inherited = (
            [c for c in self._conns if c is not None] + [parent_conn] if ctx.get_start_method() == 'fork' else []
        )
        replay = self._env_replay_path[env_id] if self._env_replay_path is not None else None
        proc = ctx.Process(
            target=env_worker,
            args=(child_conn, self._env_fn[env_id], self._shm[env_id], shape, dtype_str, replay, inherited),
            name=f'ding-env-worker-{env_id}',
            daemon=True,
        )
        proc.start()
        child_conn.close()  # only the worker holds its end, so its death reads as EOF here
        self._procs[env_id], self._conns[env_id] = proc, parent_conn

    def _stop_worker(self, env_id: int, graceful: bool) -> None:
        proc, conn = self._procs[env_id], self._conns[env_id]
        if proc is None:
            return
        if graceful and proc.is_alive():
            try:
                conn.send(('close', None))
            except (OSError, ValueError):
                pass
            proc.join(_STOP_TIMEOUT)
        if proc.is_alive():
            proc.kill()
        proc.join()
        conn.close()
        self._procs[env_id] = self._conns[env_id] = None

    def _send_error(self, env_id: int, error: Exception) -> Exception:
        """What a failed send to a worker reports: its death (as a reply would) when the process is gone, else the
        send's own error."""
        proc = self._procs[env_id]
        return self._death_error(env_id) if proc is not None and not proc.is_alive() else error

    def _death_error(self, env_id: int) -> RuntimeError:
        proc = self._procs[env_id]
        proc.join(_STOP_TIMEOUT)
        return RuntimeError(f'worker process of env {env_id} died (exitcode {proc.exitcode})')

    def _gather(self, env_ids: list[int], timeout: float | None, min_count: int | None = None) -> dict[int, Any]:
        """Collect one reply per env id: the worker's ``(ok, payload)`` tuple, or an exception when the worker
        died or did not answer within ``timeout`` seconds. With ``min_count``: return once that many have answered
        (with every reply there by then)."""
        results: dict[int, Any] = {}
        if not env_ids:
            return results
        conns, procs = self._conns, self._procs
        pending: dict[Any, int] = {conns[i]: i for i in env_ids}
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            remaining = None
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    for i in pending.values():
                        self._hung.add(i)
                        results[i] = TimeoutError(f'env {i} did not answer within {timeout}s')
                    break
            sentinels = {procs[i].sentinel: i for i in pending.values()}
            ready = mp_wait(list(pending) + list(sentinels), remaining)
            dead: list[int] = []
            for obj in ready:
                if obj not in pending:  # a process sentinel: the worker died
                    dead.append(sentinels[obj])
                    continue
                i = pending.pop(obj)
                try:
                    results[i] = cast(Connection, obj).recv()
                except (EOFError, OSError):
                    results[i] = self._death_error(i)
            for i in dead:
                conn = conns[i]
                if conn not in pending:
                    continue
                del pending[conn]
                try:
                    # a reply sent just before dying is still good
                    results[i] = conn.recv() if conn.poll(0) else self._death_error(i)
                except (EOFError, OSError):
                    results[i] = self._death_error(i)
            if min_count is not None and len(results) >= min_count:
                break
        return results

    @staticmethod
    def _as_error(reply: Any) -> BaseException:
        return reply if isinstance(reply, BaseException) else EnvWorkerError(reply[1])

    def _reset_reply_obs(self, env_id: int, reply: Any) -> Any:
        if type(reply) is not tuple or not reply[0]:
            raise self._as_error(reply)
        packed = reply[1]
        return self._slot_copy(env_id, 1) if packed is None else packed[0]

    def _slot_copy(self, env_id: int, slot: int) -> np.ndarray:
        """A copy of the observation the worker of ``env_id`` wrote to its shared-memory slot."""
        views = self._views[env_id]
        if views is None:
            raise RuntimeError(f'env {env_id} answered through shared memory it does not have')
        return views[slot].copy()

    def _seed_args(self, env_id: int) -> tuple | None:
        if not self._seed_pending[env_id]:
            return None
        self._seed_pending[env_id] = False
        return self._env_seed[env_id], self._env_dynamic_seed

    # ---- BaseEnvManager hooks -----------------------------------------------------------------------------------
    def _reset_envs(self, env_ids: list[int]) -> None:
        replies: dict[int, Any] = {}
        sent = []
        for i in env_ids:
            try:
                self._conns[i].send(('reset', (self._seed_args(i), self._reset_param[i])))
                sent.append(i)
            except (OSError, ValueError) as e:  # the worker is gone
                replies[i] = self._send_error(i, e)
        replies.update(self._gather(sent, self._reset_timeout))
        for i in env_ids:
            try:
                obs = self._reset_reply_obs(i, replies[i])
            except Exception as e:  # noqa: BLE001
                obs = self._restart(i, e)
            self._ready_obs[i] = obs
            self._env_states[i] = EnvState.RUN

    def _replay_built_envs(self, replay_path: list[str]) -> None:
        live = [i for i, proc in enumerate(self._procs) if proc is not None]
        for i in live:
            self._conns[i].send(('replay', replay_path[i]))
        for reply in self._gather(live, self._reset_timeout).values():
            if type(reply) is not tuple or not reply[0]:
                raise self._as_error(reply)

    def _renew_env(self, env_id: int) -> Any:
        self._stop_worker(env_id, graceful=env_id not in self._hung)
        self._hung.discard(env_id)
        self._start_worker(env_id)
        seed = self._env_seed[env_id]
        self._seed_pending[env_id] = False
        seed_args = None if seed is None else (seed, self._env_dynamic_seed)
        self._conns[env_id].send(('reset', (seed_args, self._reset_param[env_id])))
        reply = self._gather([env_id], self._reset_timeout)[env_id]
        return self._reset_reply_obs(env_id, reply)

    # ---- stepping -----------------------------------------------------------------------------------------------
    def step(self, actions: dict[int, Any]) -> dict[int, BaseEnvTimestep]:
        """Send every action, then wait for all of those envs; returns ``{env_id: BaseEnvTimestep}``."""
        if self._closed:
            self._check_closed()
        replies, sent = self._send_steps(actions)
        replies.update(self._gather(sent, self._step_timeout))
        return self._finish_steps(list(actions), replies, self._ready_obs)

    def _send_steps(self, actions: dict[int, Any]) -> tuple[dict[int, Any], list[int]]:
        """Send each env its action (only ids in ``ready_obs``): ``(errors of the sends that failed, ids sent)``."""
        ready = self._ready_obs
        conns = self._conns
        count = self._env_episode_count
        more_episodes = self._auto_reset
        episode_num = self._episode_num
        replies: dict[int, Any] = {}
        sent = []
        for env_id, action in actions.items():
            if env_id not in ready:
                raise KeyError(f'env {env_id!r} is not waiting for an action (ready: {sorted(ready)})')
            if hasattr(action, 'detach'):  # torch tensors travel as numpy arrays
                action = action.detach().cpu().numpy()
            auto_reset = more_episodes and count[env_id] + 1 < episode_num
            seed_args = self._seed_args(env_id) if auto_reset and self._seed_pending[env_id] else None
            try:
                conns[env_id].send(('step', (action, auto_reset, seed_args)))
                sent.append(env_id)
            except (OSError, ValueError) as e:  # the worker is gone
                replies[env_id] = self._send_error(env_id, e)
        return replies, sent

    def _finish_steps(
        self, env_ids: list[int], replies: dict[int, Any], last_obs: dict[int, Any]
    ) -> dict[int, BaseEnvTimestep]:
        """The timesteps of ``env_ids`` from their workers' ``replies``; ``ready_obs`` updated (``last_obs``: the
        observation each env was stepped from, for the abnormal timestep of a worker that failed)."""
        ready = self._ready_obs
        streak = self._fail_streak
        timesteps = {}
        for env_id in env_ids:
            reply = replies[env_id]
            if type(reply) is not tuple or not reply[0]:
                error = self._as_error(reply)
                previous = last_obs[env_id]
                ready[env_id] = self._restart(env_id, error)
                timesteps[env_id] = abnormal_timestep(previous, error)
                continue
            obs, reward, done, info, reset_obs, reset_error = reply[1]
            obs = self._slot_copy(env_id, 0) if obs is None else obs[0]
            if streak[env_id]:
                streak[env_id] = 0
            if done:
                ready.pop(env_id, None)
                if self._episode_finished(env_id):
                    if reset_error is None:
                        ready[env_id] = self._slot_copy(env_id, 1) if reset_obs is None else reset_obs[0]
                    else:
                        ready[env_id] = self._restart(env_id, EnvWorkerError(reset_error))
            else:
                ready[env_id] = obs
            timesteps[env_id] = BaseEnvTimestep(obs, reward, done, info)
        return timesteps

    def close(self) -> None:
        """Stop every worker (politely, then by SIGKILL after a grace period) and join it; idempotent."""
        if self._closed:
            return
        self._closed = True
        for i, conn in enumerate(self._conns):
            if conn is not None and i not in self._hung:
                try:
                    conn.send(('close', None))
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + _CLOSE_TIMEOUT
        for i, proc in enumerate(self._procs):
            if proc is None:
                continue
            proc.join(0 if i in self._hung else max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
            proc.join()
            self._conns[i].close()
            self._procs[i] = self._conns[i] = None
        self._hung.clear()
        self._close_common()
