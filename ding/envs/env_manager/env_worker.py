"""The loop of one env worker process of ``SubprocessEnvManager``: it builds its env and answers the manager's
commands (``step``, ``reset``, ``replay``, ``close``) over a pipe, observations through shared memory."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import numpy as np

from ding.envs.env.base_env import BaseEnv


def env_worker(
    conn: Any,
    env_fn: Callable[[], BaseEnv],
    shm: Any,
    shape: tuple | None,
    dtype_str: str | None,
    replay_path: str | None,
    inherited: list[Any],
) -> None:
    """Worker loop. Replies are ``(True, payload)`` or ``(False, repr(exception))``. An observation is written
    into shared-memory slot 0 (step) / 1 (reset) and sent as None, or sent in the message as ``(obs, )`` when it
    does not fit the slot."""
    # Ctrl-C reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Drop the parent's ends of the pipes that fork copied here, so that a dead parent shows up as EOF.
    for c in inherited:
        c.close()
    views: np.ndarray | None = None
    if shm is not None and shape is not None:
        dtype = np.dtype(dtype_str)
        views = np.frombuffer(shm, dtype=dtype, count=2 * int(np.prod(shape))).reshape((2, *shape))

    def pack(obs: Any, slot: int) -> Any:
        if views is not None and type(obs) is np.ndarray and obs.shape == views.shape[1:] and obs.dtype == views.dtype:
            views[slot] = obs
            return None
        return (obs,)

    env: BaseEnv | None = None
    make_error: Exception | None = None
    try:
        env = env_fn()
        if replay_path is not None:
            env.enable_save_replay(replay_path)
    except Exception as e:  # noqa: BLE001 -- reported on the first command; the parent restarts this worker
        make_error = e
    reset_kwargs: dict = {}
    while True:
        try:
            cmd, arg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        if cmd == 'close':
            break
        try:
            if make_error is not None or env is None:
                raise make_error or RuntimeError('the env was not built')
            if cmd == 'step':
                action, auto_reset, seed_args = arg
                timestep = env.step(action)
                reset_obs = reset_error = None
                if timestep.done and auto_reset:
                    try:
                        if seed_args is not None:
                            env.seed(*seed_args)
                        reset_obs = pack(env.reset(**reset_kwargs), 1)
                    except Exception as e:  # noqa: BLE001 -- the finished episode is still valid
                        reset_error = repr(e)
                obs = pack(timestep.obs, 0)
                conn.send((True, (obs, timestep.reward, timestep.done, timestep.info, reset_obs, reset_error)))
            elif cmd == 'replay':
                env.enable_save_replay(arg)
                conn.send((True, None))
            elif cmd == 'reset':
                seed_args, kwargs = arg
                if seed_args is not None:
                    env.seed(*seed_args)
                reset_kwargs = kwargs
                conn.send((True, pack(env.reset(**reset_kwargs), 1)))
            else:
                raise ValueError(f'unknown env worker command {cmd!r}')
        except Exception as e:  # noqa: BLE001 -- includes a reply that cannot be pickled
            try:
                conn.send((False, repr(e)))
            except (OSError, ValueError):
                break
    if env is not None:
        try:
            env.close()
        except Exception:  # noqa: BLE001
            pass
    conn.close()
