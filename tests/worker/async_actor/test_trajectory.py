"""What an actor writes into its trajectory buffers (the layout of ``protocol``), buffer reuse, double
buffering, and joining unrolls into a learner batch."""

import numpy as np
import torch

from ding.worker.async_actor import TENSOR_KEYS, EnvGroup, UnrollWriter, join_unrolls
from tests.helpers.async_toys import LinearActorPolicy, ScriptedVectorEnv


def _writer(policy, *lengths, unroll_len, allocate_per_step=False):
    groups = [EnvGroup(ScriptedVectorEnv(list(ls)), policy, seed=10 * i) for i, ls in enumerate(lengths)]
    return UnrollWriter(groups, unroll_len, allocate_per_step)


def test_an_unroll_marks_episode_ends_reset_steps_and_first_observations():
    policy = LinearActorPolicy()
    u = _writer(policy, [2, 3], unroll_len=6).collect(policy.actor_model(), version=7)
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
    assert u.env_steps == 12 and sorted(u.episode_returns) == [2.0, 2.0, 3.0] and u.policy_version == 7
    assert u.initial_state is None and u.final_state is None


def test_a_released_buffer_is_reused_by_the_next_cycle():
    policy = LinearActorPolicy()
    writer, model = _writer(policy, [3, 3, 3], unroll_len=4), policy.actor_model()
    first = writer.collect(model, 0)
    pointers = {k: v.data_ptr() for k, v in first.tensors.items()}
    first.release()
    second = writer.collect(model, 1)
    assert {k: v.data_ptr() for k, v in second.tensors.items()} == pointers
    # a buffer still held (queued, or being batched) is never written over: the next cycle gets another one
    third = writer.collect(model, 2)
    assert third.tensors['obs'].data_ptr() != pointers['obs'] and writer.buffers_made == 2


def test_allocating_per_step_writes_the_same_unroll():
    policy = LinearActorPolicy()
    torch.manual_seed(0)
    pre = _writer(policy, [2, 4], [3], unroll_len=5).collect(policy.actor_model(), 0)
    torch.manual_seed(0)
    fresh = _writer(policy, [2, 4], [3], unroll_len=5, allocate_per_step=True).collect(policy.actor_model(), 0)
    for key in TENSOR_KEYS:
        assert torch.equal(pre.tensors[key], fresh.tensors[key]), key
    assert fresh.buffer is None  # nothing to give back


def test_double_buffering_writes_both_groups_side_by_side_in_one_unroll():
    policy = LinearActorPolicy()
    writer = _writer(policy, [2, 2], [3, 3], unroll_len=4)
    a, b = (group.env for group in writer.groups)
    u = writer.collect(policy.actor_model(), 0)
    assert a.steps == b.steps == 4 and u.tensors['obs'].shape == (5, 4, 2) and u.env_steps == 16
    assert u.tensors['done'][:, 0].tolist() == [False, True, False, False]
    assert u.tensors['done'][:, 2].tolist() == [False, False, True, False]
    # the actions each env got are the ones written for it
    assert np.array_equal(np.stack(a.actions_seen), u.tensors['action'][:, :2].numpy())
    assert np.array_equal(np.stack(b.actions_seen), u.tensors['action'][:, 2:].numpy())


def test_a_learner_batch_joins_unrolls_on_the_env_dim_and_owns_its_memory():
    policy = LinearActorPolicy()
    model = policy.actor_model()
    unrolls = [
        _writer(policy, [2, 3], unroll_len=3).collect(model, 0),
        _writer(policy, [4], unroll_len=3).collect(model, 0),
    ]
    batch = join_unrolls(unrolls)
    assert batch['obs'].shape == (4, 3, 2) and batch['mask'].shape == (3, 3)
    assert batch['actor_state'] is None
    before = batch['obs'].clone()
    for u in unrolls:
        u.tensors['obs'].zero_()  # the actor reuses the buffer
    assert torch.equal(batch['obs'], before)


def test_a_numpy_actor_writes_the_models_logits_and_samples_from_them():
    torch.manual_seed(3)
    policy = LinearActorPolicy(numpy=True)
    model = policy.actor_model()
    env = ScriptedVectorEnv([50] * 64)
    group = EnvGroup(env, policy, seed=0, numpy_actor=policy.numpy_actor(model, np.zeros((4, 2), np.float32)))
    assert group.numpy_actor is not None
    unroll = UnrollWriter([group], unroll_len=30).collect(model, version=0)
    t = unroll.tensors
    with torch.no_grad():
        expected = model(t['obs'][:-1])
    torch.testing.assert_close(t['logit'], expected)
    # Gumbel-max sampling: the share of action 1 follows softmax(logit) (1920 draws, 4 standard errors)
    p1 = torch.softmax(t['logit'], -1)[..., 1]
    share, mean = t['action'].float().mean().item(), p1.mean().item()
    assert abs(share - mean) < 4 * (mean * (1 - mean) / p1.numel()) ** 0.5
    assert np.array_equal(np.concatenate(env.actions_seen), t['action'].reshape(-1).numpy())
