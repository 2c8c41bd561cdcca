"""Replay buffers: FIFO ring, uniform and prioritized sampling, IS weights, max_use, staleness, state dicts."""

import time

import numpy as np
import pytest
import torch

from ding.utils.registry import BUFFER_REGISTRY
from ding.worker.replay_buffer import (
    AdvancedReplayBuffer,
    MinSegmentTree,
    NaiveReplayBuffer,
    SumSegmentTree,
    create_buffer,
    get_buffer_cls,
)


def items(n, start=0, **extra):
    return [dict(obs=torch.full((3,), float(start + i)), value=start + i, **extra) for i in range(n)]


@pytest.fixture(autouse=True)
def _seed():
    np.random.seed(0)


# ---- segment trees ---------------------------------------------------------------------------------
@pytest.mark.parametrize('size', [1, 3, 17, 1000])
def test_segment_trees_agree_with_numpy(size):
    rng = np.random.default_rng(size)
    sum_tree, min_tree = SumSegmentTree(size), MinSegmentTree(size)
    ref = np.zeros(size)
    for _ in range(30):
        idx = rng.integers(0, size, rng.integers(1, 8))
        val = rng.random(len(idx))
        sum_tree[idx] = val
        min_tree[idx] = val
        ref[idx] = val
        one = int(rng.integers(size))
        sum_tree[one] = min_tree[one] = ref[one] = 0.25  # scalar path
    assert sum_tree.reduce() == pytest.approx(ref.sum())
    touched = ref > 0
    assert min_tree.reduce() == pytest.approx(ref[touched].min())
    if size > 2:
        assert sum_tree.reduce(1, size - 1) == pytest.approx(ref[1 : size - 1].sum())
    mass = rng.random(200) * ref.sum()
    expected = np.searchsorted(np.cumsum(ref), mass, side='right')
    np.testing.assert_array_equal(sum_tree.find_prefixsum_idx(mass), expected)


def test_sum_tree_never_returns_zero_leaves():
    tree = SumSegmentTree(8)
    tree[np.arange(8)] = np.array([0, 1, 0, 0, 2, 0, 0, 0.5])
    picked = tree.find_prefixsum_idx(np.linspace(0, tree.reduce(), 1000, endpoint=False))
    assert set(picked.tolist()) == {1, 4, 7}


# ---- factory ---------------------------------------------------------------------------------------
def test_create_buffer_types_and_deque_alias():
    assert isinstance(create_buffer(dict(type='naive', replay_buffer_size=4)), NaiveReplayBuffer)
    deque_buf = create_buffer(dict(type='deque', replay_buffer_size=4))
    assert isinstance(deque_buf, NaiveReplayBuffer) and deque_buf.replay_buffer_size == 4
    assert get_buffer_cls(dict(type='advanced')) is AdvancedReplayBuffer
    assert {'naive', 'deque', 'advanced'} <= set(BUFFER_REGISTRY.query())
    with pytest.raises(KeyError, match='unknown type'):
        create_buffer(dict(type='nope'))
    with pytest.raises(ValueError, match='replay_buffer_size'):
        NaiveReplayBuffer(dict(replay_buffer_size=0))
    cfg = AdvancedReplayBuffer.default_config()
    assert cfg.alpha == 0.6 and cfg.beta == 0.4 and cfg.max_use == float('inf')
    assert cfg.cfg_type == 'AdvancedReplayBufferDict'


# ---- naive -----------------------------------------------------------------------------------------
@pytest.mark.parametrize('kind', ['naive', 'advanced'])
def test_fifo_overwrite_and_unique_ids(kind):
    buf = create_buffer(dict(type=kind, replay_buffer_size=5))
    buf.push(items(3))
    buf.push(items(4, start=3))
    assert buf.count() == 5 and buf.push_count == 7
    got = buf.sample(5, 0)
    # the two oldest (0, 1) were overwritten
    assert sorted(d['value'] for d in got) == [2, 3, 4, 5, 6]
    # every item gets its own id; slots are the ring positions
    ids = {d['value']: d['replay_unique_id'] for d in got}
    assert len(set(ids.values())) == 5
    assert {d['replay_buffer_idx'] for d in got} == set(range(5))
    # one dict push works too, and ids never repeat
    buf.push(dict(obs=torch.zeros(3), value=99))
    later = buf.sample(5, 0)
    assert not ({d['replay_unique_id'] for d in later if d['value'] == 99} & set(ids.values()))


@pytest.mark.parametrize('kind', ['naive', 'advanced'])
def test_sample_returns_none_without_enough_data(kind):
    buf = create_buffer(dict(type=kind, replay_buffer_size=10))
    assert buf.sample(1, 0) is None
    buf.push(items(3))
    assert buf.sample(4, 0) is None
    assert len(buf.sample(3, 0)) == 3


def test_naive_sample_without_replacement_and_with():
    buf = NaiveReplayBuffer(dict(replay_buffer_size=100))
    buf.push(items(100))
    batch = buf.sample(64, 0)
    assert len({d['replay_unique_id'] for d in batch}) == 64
    small = NaiveReplayBuffer(dict(replay_buffer_size=10))
    small.push(items(2))
    assert len(small.sample(8, 0, replace=True)) == 8
    assert small.sample(8, 0) is None


def test_naive_sample_range_uses_newest_items():
    buf = NaiveReplayBuffer(dict(replay_buffer_size=10))
    buf.push(items(25))  # ring wrapped: holds 15..24, oldest at the tail
    got = buf.sample(3, 0, sample_range=slice(-3, None))
    assert sorted(d['value'] for d in got) == [22, 23, 24]


def test_sampled_dicts_are_shallow_copies():
    buf = NaiveReplayBuffer(dict(replay_buffer_size=4))
    pushed = items(4)
    buf.push(pushed)
    assert 'replay_unique_id' not in pushed[0]  # the caller's dicts are not tagged
    batch = buf.sample(4, 0)
    batch[0]['added_by_learner'] = 1
    again = buf.sample(4, 0)
    assert all('added_by_learner' not in d for d in again)
    # tensors are shared, not copied
    stored = {d['value']: d['obs'] for d in again}
    assert any(stored[d['value']] is d['obs'] for d in batch)


def test_deepcopy_option_copies_tensors():
    buf = NaiveReplayBuffer(dict(replay_buffer_size=2, deepcopy=True))
    src = items(1)
    buf.push(src)
    out = buf.sample(1, 0)[0]
    assert out['obs'] is not src[0]['obs'] and torch.equal(out['obs'], src[0]['obs'])


def test_push_rejects_non_dicts():
    buf = NaiveReplayBuffer(dict(replay_buffer_size=2))
    with pytest.raises(TypeError, match='dict'):
        buf.push([1, 2])


@pytest.mark.parametrize('kind', ['naive', 'advanced'])
def test_state_dict_round_trip_through_a_file(kind, tmp_path):
    buf = create_buffer(dict(type=kind, replay_buffer_size=6))
    buf.push(items(8))
    if kind == 'advanced':
        batch = buf.sample(4, 0)
        buf.update(
            dict(
                replay_unique_id=[d['replay_unique_id'] for d in batch],
                replay_buffer_idx=[d['replay_buffer_idx'] for d in batch],
                priority=[5.0] * 4,
            )
        )
    torch.save(buf.state_dict(), tmp_path / 'buffer.pt')
    state = torch.load(tmp_path / 'buffer.pt', weights_only=True)
    other = create_buffer(dict(type=kind, replay_buffer_size=6))
    other.load_state_dict(state)
    assert other.count() == 6 and other.push_count == 8
    np.random.seed(3)
    a = buf.sample(6, 0)
    np.random.seed(3)
    b = other.sample(6, 0)
    assert [d['replay_unique_id'] for d in a] == [d['replay_unique_id'] for d in b]
    if kind == 'advanced':
        assert [d['IS'] for d in a] == pytest.approx([d['IS'] for d in b])
        assert other.beta == pytest.approx(buf.beta)
    other.push(items(1, start=100))  # ids continue after the loaded ones
    assert other.sample(6, 0) is not None
    with pytest.raises(ValueError, match='replay_buffer_size'):
        create_buffer(dict(type=kind, replay_buffer_size=3)).load_state_dict(state)


def test_clear_empties_buffer():
    buf = NaiveReplayBuffer(dict(replay_buffer_size=4))
    buf.push(items(4))
    buf.clear()
    assert buf.count() == 0 and buf.sample(1, 0) is None
    buf.push(items(2))
    assert buf.count() == 2


# ---- advanced --------------------------------------------------------------------------------------
def _update(buf, batch, priority):
    buf.update(
        dict(
            replay_unique_id=[d['replay_unique_id'] for d in batch],
            replay_buffer_idx=[d['replay_buffer_idx'] for d in batch],
            priority=priority,
        )
    )


def test_priorities_change_sampling_frequency():
    buf = AdvancedReplayBuffer(dict(replay_buffer_size=10, alpha=1.0))
    buf.push(items(10))
    all_items = buf.sample(10, 0)  # stratified over equal priorities -> each item once
    assert sorted(d['value'] for d in all_items) == list(range(10))
    priority = [10.0 if d['value'] == 3 else 1.0 for d in all_items]
    _update(buf, all_items, priority)
    counts = np.zeros(10)
    for _ in range(200):
        for d in buf.sample(4, 0):
            counts[d['value']] += 1
    share = counts[3] / counts.sum()
    assert share == pytest.approx(10 / 19, abs=0.05)  # p^alpha / sum = 10 / (10 + 9)


def test_is_weights_in_unit_interval_normalised_by_rarest():
    buf = AdvancedReplayBuffer(dict(replay_buffer_size=8, alpha=1.0, beta=0.5, anneal_step=100))
    buf.push(items(8))
    batch = buf.sample(8, 0)
    assert all(d['IS'] == pytest.approx(1.0) for d in batch)  # equal priorities -> equal weights
    _update(buf, batch, [1.0 + d['value'] for d in batch])
    beta = buf.beta  # the weights of the next sample use this beta; it anneals afterwards
    for _ in range(5):
        for d in buf.sample(8, 0):
            # w_i / w_max = (p_i / p_min)^-beta with p_min = 1 (item 0)
            assert d['IS'] == pytest.approx((1.0 + d['value']) ** -beta)
            assert 0 < d['IS'] <= 1
        beta = buf.beta


def test_beta_anneals_to_one():
    buf = AdvancedReplayBuffer(dict(replay_buffer_size=8, beta=0.4, anneal_step=10))
    buf.push(items(8))
    betas = []
    for _ in range(12):
        buf.sample(2, 0)
        betas.append(buf.beta)
    assert betas[0] == pytest.approx(0.46)
    assert betas[9] == pytest.approx(1.0) and betas[-1] == 1.0


def test_max_use_removes_items():
    buf = AdvancedReplayBuffer(dict(replay_buffer_size=4, max_use=2))
    buf.push(items(4))
    buf.sample(4, 0)
    assert buf.count() == 4
    buf.sample(4, 0)
    assert buf.count() == 0 and buf.use_remove_count == 4
    assert buf.sample(1, 0) is None
    buf.push(items(2, start=10))  # removed slots are reused
    assert sorted(d['value'] for d in buf.sample(2, 0)) == [10, 11]


def test_max_staleness_drops_and_counts():
    buf = AdvancedReplayBuffer(dict(replay_buffer_size=10, max_staleness=5))
    buf.push(items(3, collect_iter=0))
    buf.push(items(3, start=3, collect_iter=4))
    buf.push(items(2, start=6))  # no collect_iter: never stale
    assert len(buf.sample(8, 5)) == 8  # 5 - 0 = 5 is not older than max_staleness
    assert buf.sample(8, 6) is None  # the three from iter 0 are dropped now
    assert buf.count() == 5 and buf.staleness_remove_count == 3
    assert sorted(d['value'] for d in buf.sample(5, 9)) == [3, 4, 5, 6, 7]
    assert buf.sample(1, 10) is not None
    assert buf.count() == 2 and buf.staleness_remove_count == 6


def test_update_ignores_overwritten_slots():
    buf = AdvancedReplayBuffer(dict(replay_buffer_size=2, alpha=1.0))
    buf.push(items(2))
    old = buf.sample(2, 0)
    buf.push(items(2, start=2))  # both slots now hold new items
    _update(buf, old, [100.0, 100.0])
    counts = np.zeros(4)
    for _ in range(50):
        for d in buf.sample(2, 0):
            counts[d['value']] += 1
    assert counts[2] == counts[3] == 50  # still equal priorities
    with pytest.raises(KeyError, match='priority'):
        buf.update(dict(replay_unique_id=[], replay_buffer_idx=[]))
    with pytest.raises(ValueError, match='finite'):
        _update(buf, buf.sample(1, 0), [float('nan')])


def test_pushed_priority_is_used():
    buf = AdvancedReplayBuffer(dict(replay_buffer_size=4, alpha=1.0))
    buf.push([dict(value=0, priority=9.0), dict(value=1, priority=1.0)])
    counts = np.zeros(2)
    for _ in range(100):
        for d in buf.sample(1, 0):
            counts[d['value']] += 1
    assert counts[0] / 100 == pytest.approx(0.9, abs=0.1)


def test_uniform_mode_when_priority_off():
    buf = AdvancedReplayBuffer(dict(replay_buffer_size=4, priority=False))
    buf.push(items(4))
    batch = buf.sample(4, 0)
    _update(buf, batch, [1.0, 50.0, 1.0, 1.0])
    assert all(d['IS'] == 1.0 for d in buf.sample(4, 0))


def test_thruput_controller_refuses_oversampling_and_overpushing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a refused push is logged to ./default_experiment/log/buffer/
    cfg = dict(
        replay_buffer_size=100, thruput_controller=dict(push_sample_rate_limit=dict(max=2, min=0.5), window_seconds=60)
    )
    buf = AdvancedReplayBuffer(cfg)
    buf.push(items(10))
    assert buf.sample(10, 0) is not None  # 10 pushed / 10 sampled = 1
    assert buf.sample(10, 0) is not None  # 10 / 20 = 0.5
    assert buf.sample(2, 0) is None  # 10 / 22 < 0.5: the learner has to wait for data
    assert buf.refused_sample_count == 1
    buf.push(items(30, start=10))  # 40 / 20 = 2: allowed
    assert buf.count() == 40
    buf.push(items(1, start=40))  # 41 / 20 > 2: refused, dropped
    assert buf.count() == 40 and buf.refused_push_count == 1
    buf.close()
    log = tmp_path / 'default_experiment' / 'log' / 'buffer' / 'buffer_logger.txt'
    assert 'refused' in log.read_text()


def test_sample_speed_prioritized():
    buf = AdvancedReplayBuffer(dict(replay_buffer_size=20000))
    buf.push([dict(obs=torch.zeros(4)) for _ in range(20000)])
    buf.sample(64, 0)
    start = time.perf_counter()
    for _ in range(100):
        batch = buf.sample(64, 0)
        _update(buf, batch, np.random.rand(64) + 0.1)
    per_call = (time.perf_counter() - start) / 100
    assert per_call < 5e-3  # sample + update of 64 out of 20k, generous for a loaded machine
