"""What an actor writes into its trajectory buffers (the layout of ``protocol``), buffer reuse, and joining
unrolls into a learner batch."""

import numpy as np
import torch

from ding.worker.async_actor import TENSOR_KEYS, EnvGroup, join_unrolls, run_cycle
from tests.helpers.async_toys import LinearActorPolicy, ScriptedVectorEnv


def _unroll(group, policy, unroll_len, version=0):
    run_cycle([group], policy.actor_model(), unroll_len)
    return group.finish_unroll(unroll_len, version, actor_id=0)


def test_an_unroll_marks_episode_ends_reset_steps_and_first_observations():
    policy = LinearActorPolicy()
    group = EnvGroup(ScriptedVectorEnv([2, 3]), policy, seed=0)
    u = _unroll(group, policy, unroll_len=6)
    t = u.tensors
    assert t['obs'].shape == (7, 2, 2) and t['first'].shape == (7, 2) and t['action'].shape == (6, 2)
    # env 0: steps 1, 2 (ends), reset, 1, 2 (ends), reset; env 1: 1, 2, 3 (ends), reset, 1, 2
    assert t['done'][:, 0].tolist() == [False, True, False, False, True, False]
    assert t['done'][:, 1].tolist() == [False, False, True, False, False, False]
    assert t['mask'][:, 0].tolist() == [1, 1, 0, 1, 1, 0]
    assert t['reward'][:, 1].tolist() == [1, 1, 1, 0, 1, 1]
    assert t['first'][:, 0].tolist() == [True, False, False, True, False, False, True]
    assert t['obs'][:, 0, 1].tolist() == [0, 1, 2, 0, 1, 2, 0]  # obs[T] is the bootstrap observation
    assert not t['truncated'].any()
    assert u.env_steps == 12 and u.episode_returns == [2.0, 3.0, 2.0]
    assert u.initial_state is None and u.final_state is None


def test_a_released_buffer_is_reused_by_the_next_cycle():
    policy = LinearActorPolicy()
    group = EnvGroup(ScriptedVectorEnv([3, 3, 3]), policy, seed=0)
    first = _unroll(group, policy, 4)
    pointers = {k: v.data_ptr() for k, v in first.tensors.items()}
    first.release()
    second = _unroll(group, policy, 4)
    assert {k: v.data_ptr() for k, v in second.tensors.items()} == pointers
    # a buffer still held (queued, or being batched) is never written over: the next cycle gets another one
    third = _unroll(group, policy, 4)
    assert third.tensors['obs'].data_ptr() != pointers['obs']


def test_allocating_per_step_writes_the_same_unroll():
    policy = LinearActorPolicy()
    torch.manual_seed(0)
    pre = _unroll(EnvGroup(ScriptedVectorEnv([2, 4]), policy, seed=0), policy, 5)
    torch.manual_seed(0)
    fresh = _unroll(EnvGroup(ScriptedVectorEnv([2, 4]), policy, seed=0, allocate_per_step=True), policy, 5)
    for key in TENSOR_KEYS:
        assert torch.equal(pre.tensors[key], fresh.tensors[key]), key
    assert fresh.buffer is None  # nothing to give back


def test_double_buffering_steps_each_group_in_order():
    policy = LinearActorPolicy()
    a, b = ScriptedVectorEnv([2, 2]), ScriptedVectorEnv([3, 3])
    groups = [EnvGroup(a, policy, seed=0), EnvGroup(b, policy, seed=2)]
    run_cycle(groups, policy.actor_model(), 4)
    ua, ub = (g.finish_unroll(4, 0, 0) for g in groups)
    assert a.steps == b.steps == 4
    assert ua.tensors['done'][:, 0].tolist() == [False, True, False, False]
    assert ub.tensors['done'][:, 0].tolist() == [False, False, True, False]
    # the actions each env got are the ones written for it
    assert np.array_equal(np.stack(a.actions_seen), ua.tensors['action'].numpy())
    assert np.array_equal(np.stack(b.actions_seen), ub.tensors['action'].numpy())


def test_a_learner_batch_joins_unrolls_on_the_env_dim_and_owns_its_memory():
    policy = LinearActorPolicy()
    groups = [EnvGroup(ScriptedVectorEnv([2, 3]), policy, seed=0), EnvGroup(ScriptedVectorEnv([4]), policy, seed=2)]
    unrolls = [_unroll(g, policy, 3) for g in groups]
    batch = join_unrolls(unrolls)
    assert batch['obs'].shape == (4, 3, 2) and batch['mask'].shape == (3, 3)
    assert batch['actor_state'] is None
    before = batch['obs'].clone()
    for u in unrolls:
        u.tensors['obs'].zero_()  # the actor reuses the buffer
    assert torch.equal(batch['obs'], before)
