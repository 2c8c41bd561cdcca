"""Trajectory assembly on the learner side: the requests of one actor turned into unrolls / transitions."""

from __future__ import annotations

import numpy as np
import pytest

from ding.rl_utils import get_nstep_return_data
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


def test_nstep_transitions_in_a_hand_worked_example():
    queue = TrajectoryQueue(4)
    assembler = TransitionAssembler(4, LAYOUT, queue, nstep=2, gamma=0.5)
    assembler.join(0)
    play(assembler, 5)  # env 0: steps 0, 1 (terminated), 2 (reset step), 3; env 1: steps 0-3, never ends
    chunk = queue.get(timeout=0)
    assert chunk is not None
    samples = {(int(o[0]), int(o[1])): i for i, o in enumerate(chunk.obs)}
    # env 1's windows close two steps on: obs k -> obs k + 2, both rewards, gamma ** 2, no done
    for k in (0, 1, 2):
        i = samples[1, k]
        assert chunk.next_obs[i].tolist() == [1, k + 2] and chunk.reward[i].tolist() == [1.0, 1.0]
        assert chunk.value_gamma[i] == 0.25 and not chunk.done[i]
    # env 0's episode terminated at step 1: step 0's window stops there (reward padded), step 1 alone
    i, j = samples[0, 0], samples[0, 1]
    assert chunk.next_obs[i].tolist() == [0, 2] and chunk.reward[i].tolist() == [1.0, 1.0] and chunk.done[i]
    assert chunk.value_gamma[i] == 0.25
    assert chunk.next_obs[j].tolist() == [0, 2] and chunk.reward[j].tolist() == [1.0, 0.0] and chunk.done[j]
    assert chunk.value_gamma[j] == 0.5
    assert len(samples) == 5  # env 0's step 3 and env 1's step 3 still wait for their second reward
    assert sorted(chunk.transitions()[0]) == ['action', 'done', 'next_obs', 'obs', 'reward', 'value_gamma']
    assembler.drop(0)
    assert assembler.discarded_transitions == 2 and assembler.discarded_chunks == 0


def _random_requests(n_envs: int, requests: int, seed: int):
    """What one actor's envs send, as the server hands it over, with random rewards, terminations and
    truncations (and the reset step after each end); also each env's one-step transitions, in order."""
    rng = np.random.default_rng(seed)
    counter = np.zeros(n_envs, dtype=np.int64)
    obs = np.stack([np.arange(n_envs), counter], axis=1).astype(np.float32)
    first, reward = np.ones(n_envs, dtype=bool), np.zeros(n_envs, dtype=np.float32)
    terminated, truncated = np.zeros(n_envs, dtype=bool), np.zeros(n_envs, dtype=bool)
    per_env: list[list[dict]] = [[] for _ in range(n_envs)]
    out = []
    for k in range(requests):
        action = rng.integers(0, 2, n_envs)
        out.append((obs, first, reward, (terminated, truncated), action))
        if k == requests - 1:
            break  # the step after the last request is never reported
        was_ended = terminated | truncated
        counter = counter + 1
        next_obs = np.stack([np.arange(n_envs), counter], axis=1).astype(np.float32)
        reward = np.where(was_ended, 0.0, rng.normal(size=n_envs)).astype(np.float32)
        draw = rng.random(n_envs)
        terminated, truncated = ~was_ended & (draw < 0.1), ~was_ended & (draw > 0.93)
        for env in np.flatnonzero(~was_ended):
            per_env[env].append(
                {
                    'obs': obs[env],
                    'action': action[env],
                    'reward': reward[env],
                    'next_obs': next_obs[env],
                    'done': bool(terminated[env]),
                    'end': bool(terminated[env] or truncated[env]),
                }
            )
        obs, first = next_obs, was_ended
    return out, per_env


def _serial_samples(transitions: list[dict], nstep: int, gamma: float) -> dict[tuple[int, int], dict]:
    """The serial pipeline's n-step samples of one env: episode by episode; in the unfinished last one only the
    transitions whose window is complete."""
    samples, episode = {}, []
    for i, transition in enumerate(transitions):
        episode.append(transition)
        last = i == len(transitions) - 1
        if transition['end'] or last:
            made = get_nstep_return_data(episode, nstep, gamma)
            if not transition['end']:
                made = made[: max(len(made) - (nstep - 1), 0)]
            samples.update({(int(s['obs'][0]), int(s['obs'][1])): s for s in made})
            episode = []
    return samples


def test_nstep_transitions_equal_the_serial_pipelines_per_episode():
    nstep, gamma, n_envs = 3, 0.9, 4
    requests, per_env = _random_requests(n_envs, 81, seed=0)
    queue = TrajectoryQueue(64)
    assembler = TransitionAssembler(5, SlotLayout(n_envs, (2,), 2), queue, nstep=nstep, gamma=gamma)
    assembler.join(0)
    for obs, first, reward, ended, action in requests:
        logit = np.zeros((n_envs, 2), dtype=np.float32)
        assembler.record(0, obs, first, reward, ended, action, logit, version=0)
    got = {}
    for chunk in queue.drain():
        for sample in chunk.transitions():
            got[int(sample['obs'][0]), int(sample['obs'][1])] = sample
    expected = {}
    for transitions in per_env:
        expected.update(_serial_samples(transitions, nstep, gamma))
    assert sorted(got) == sorted(expected)
    assert any(not s['done'] and float(s['value_gamma']) > gamma**nstep + 1e-6 for s in got.values())  # truncated
    for key, sample in expected.items():
        mine = got[key]
        np.testing.assert_allclose(mine['reward'].numpy(), sample['reward'].numpy(), rtol=1e-6)
        np.testing.assert_allclose(mine['value_gamma'].numpy(), sample['value_gamma'].numpy(), rtol=1e-6)
        assert bool(mine['done']) == sample['done'] and int(mine['action']) == int(sample['action'])
        np.testing.assert_array_equal(mine['next_obs'].numpy(), sample['next_obs'])
