"""The gymnasium backend's subprocesses: close stops every one of them, also with a step in flight."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from ding.envs.vector import GymnasiumVectorEnv, make_vector_env
from tests.helpers.wait import wait_until

CORRIDOR = 'tests.helpers.corridor_env:Corridor-v0'


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


@pytest.mark.parametrize('in_flight', [False, True], ids=['idle', 'step-in-flight'])
def test_close_leaves_no_subprocess_behind(in_flight):
    env = make_vector_env(dict(env_id=CORRIDOR), 3, 0)
    try:
        assert isinstance(env, GymnasiumVectorEnv)
        pids = env.worker_pids
        assert len(pids) == 3 and all(alive(pid) for pid in pids) and os.getpid() not in pids
        env.reset(seed=0)
        if in_flight:
            env.send(np.ones(3))
    finally:
        env.close()
    assert not any(alive(pid) for pid in pids)
    env.close()  # a second close is harmless


def test_spawned_workers_build_the_env_from_its_id():
    env = make_vector_env(dict(env_id=CORRIDOR, context='spawn'), 2, 0)
    try:
        env.reset(seed=0)
        assert env.step(np.ones(2))[1].tolist() == [1.0, 1.0]
    finally:
        env.close()


def test_sync_recv_without_send_is_an_error():
    env = make_vector_env(dict(env_id=CORRIDOR, vectorization_mode='sync'), 2, 0)
    try:
        env.reset(seed=0)
        with pytest.raises(RuntimeError, match='recv'):
            env.recv()
    finally:
        env.close()


def test_a_dead_worker_fails_the_step_and_close_still_stops_the_others():
    env = make_vector_env(dict(env_id=CORRIDOR), 3, 0)
    pids = env.worker_pids
    try:
        env.reset(seed=0)
        os.kill(pids[1], signal.SIGKILL)
        wait_until(lambda: not alive(pids[1]), timeout=10)
        with pytest.raises(OSError):  # the actor thread's step raises; the pipeline stops the run
            env.step(np.ones(3))
    finally:
        env.close()
    assert not any(alive(pid) for pid in pids)
