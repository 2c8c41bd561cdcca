"""Trajectory assembly on the learner side: the requests of one actor turned into unrolls / transitions."""

from __future__ import annotations

import numpy as np
import pytest

from ding.worker.async_actor.queues import TrajectoryQueue
from ding.worker.seed.assembly import TransitionAssembler, UnrollAssembler
from ding.worker.seed.transport import SlotLayout

LAYOUT = SlotLayout(2, (2,), 2)


def play(assembler, requests: int, end_env0_after_step: int = 1, actor_id: int = 0) -> None:
    """``requests`` requests of two envs, as the server hands them over: observation ``[env, k]``, reward 1
    per step; env 0's episode terminates at step ``end_env0_after_step`` (so the step after it is its reset
    step, rewarded 0), env 1's never ends."""
    ended = np.ones(2, dtype=bool)  # the server's view before the first request: every env starts
    for k in range(requests):
        obs = np.array([[0, k], [1, k]], dtype=np.float32)
        reset_step = k >= 1 and k - 1 == end_env0_after_step + 1
        reward = np.array([0.0 if (k == 0 or reset_step) else 1.0, 0.0 if k == 0 else 1.0], dtype=np.float32)
        terminated = np.array([k >= 1 and k - 1 == end_env0_after_step, False])
        truncated = np.zeros(2, dtype=bool)
        action = np.array([k % 2, (k + 1) % 2], dtype=np.int64)
        logit = np.full((2, 2), float(k), dtype=np.float32)
        assembler.record(actor_id, obs, ended, reward, (terminated, truncated), action, logit, version=10 + k)
        ended = terminated | truncated


def test_an_unroll_holds_the_steps_with_episode_boundaries_in_the_async_layout():
    queue = TrajectoryQueue(4)
    assembler = UnrollAssembler(3, LAYOUT, queue)
    assembler.join(0)
    play(assembler, 4)  # requests 0..3 complete steps 0..2: one unroll
    unroll = queue.get(timeout=0)
    assert unroll is not None and queue.qsize() == 0
    t = unroll.tensors
    assert t['obs'][:, 0, 1].tolist() == [0, 1, 2, 3]  # obs[3]: the bootstrap observation
    assert t['action'][:, 0].tolist() == [0, 1, 0]
    assert t['done'][:, 0].tolist() == [False, True, False]  # env 0 terminated at step 1
    assert t['mask'][:, 0].tolist() == [1.0, 1.0, 0.0]  # step 2 was its reset step
    assert t['first'][:, 0].tolist() == [True, False, False, True]
    assert t['first'][:, 1].tolist() == [True, False, False, False]
    assert t['logit'][2, 0].tolist() == [2.0, 2.0]
    assert unroll.policy_version == 10 and unroll.env_steps == 6
    assert unroll.episode_returns == [2.0]
    assert assembler.env_steps == 6


def test_a_dropped_actor_loses_its_partial_unroll_counted_and_joins_again_from_scratch():
    queue = TrajectoryQueue(4)
    assembler = UnrollAssembler(3, LAYOUT, queue)
    assembler.join(1)
    play(assembler, 3, actor_id=1)  # two steps of three
    assembler.drop(1)
    assert (assembler.discarded_chunks, assembler.discarded_steps) == (1, 4)
    assembler.join(1)
    play(assembler, 4, actor_id=1)
    assert queue.qsize() == 1


def test_transitions_skip_the_reset_step_and_done_means_terminated():
    queue = TrajectoryQueue(4)
    assembler = TransitionAssembler(3, LAYOUT, queue)
    assembler.join(0)
    play(assembler, 4)
    chunk = queue.get(timeout=0)
    assert chunk is not None
    assert len(chunk.action) == 5  # 3 steps x 2 envs, less env 0's reset step
    assert chunk.obs[:, 0].tolist() == [0, 1, 0, 1, 1]
    assert chunk.obs[:, 1].tolist() == [0, 0, 1, 1, 2]
    np.testing.assert_array_equal(chunk.next_obs[:, 1], chunk.obs[:, 1] + 1)
    assert chunk.done.tolist() == [False, False, True, False, False]
    transitions = chunk.transitions()
    assert sorted(transitions[2]) == ['action', 'done', 'next_obs', 'obs', 'reward']
    assert bool(transitions[2]['done']) and float(transitions[2]['reward']) == pytest.approx(1.0)
