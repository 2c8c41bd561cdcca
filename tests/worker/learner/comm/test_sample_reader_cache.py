"""``SampleReader`` keeps many sample files cached (a uniform replay buffer hits a new file on almost every
read), bounded by the bytes of their tensors, and evicts the least recently used first."""

import os
import random
import threading

import torch

from ding.utils.collate import default_collate
from ding.utils.file_transport import SampleReader, save_samples, split_data_id, unique_stem


def _write(path_data, n, value):
    return save_samples(path_data, unique_stem('s'), [{'obs': torch.full((4,), float(value) + i)} for i in range(n)])


def test_reads_samples_of_many_files_and_evicts_by_bytes(tmp_path):
    files = [_write(str(tmp_path), 8, 100 * f) for f in range(6)]
    file_bytes = 8 * 4 * 4  # 8 samples of 4 float32
    reader = SampleReader(str(tmp_path), cache_bytes=3 * file_bytes)
    for f, ids in enumerate(files):
        assert reader.read(ids[5])['obs'].tolist() == [100.0 * f + 5] * 4
    # Only the three most recent files stay: deleting an old one makes it unreadable, a recent one is cached.
    for ids in (files[0], files[5]):
        name = ids[0].split('#')[0]
        os.remove(os.path.join(str(tmp_path), name))
    assert reader.read(files[5][1])['obs'].tolist() == [501.0] * 4
    try:
        reader.read(files[0][1])
    except Exception as exc:  # CheckpointError naming the missing file
        assert files[0][0].split('#')[0] in str(exc)
    else:
        raise AssertionError('an evicted, deleted file was still readable')


def test_reads_several_samples_of_one_file_at_once(tmp_path):
    ids = _write(str(tmp_path), 8, 0)
    name = ids[0].split('#')[0]
    reader = SampleReader(str(tmp_path))
    assert not reader.cached(name)
    first, missing, last = reader.read_file_samples(name, [0, 8, 7])
    assert reader.cached(name)
    assert first['obs'].tolist() == [0.0] * 4 and last['obs'].tolist() == [7.0] * 4
    assert missing is None  # beyond the file's 8 samples
    first['policy_iter'] = 3  # the caller may add keys: the next read gets a clean dict
    assert 'policy_iter' not in reader.read_file_samples(name, [0])[0]


def _mixed_file(path_data, n, seed, reward_as_int=False):
    """Samples as collectors write them: tensors, a python bool, ints, floats (or ints) and a string."""
    g = torch.Generator().manual_seed(seed)
    samples = [
        {
            'obs': torch.randn(3, generator=g),
            'action': torch.randint(0, 4, (), generator=g),
            'done': i % 3 == 0,
            'env_id': i,
            'reward': (i if reward_as_int else i + 0.5),
            'tag': f's{seed}_{i}',
        }
        for i in range(n)
    ]
    return save_samples(path_data, unique_stem('mixed'), samples)


def test_gather_gives_what_collating_the_samples_gives(tmp_path):
    # The third file's rewards are ints: mixed with the others' floats they collate to float32, as one list would.
    files = [
        _mixed_file(str(tmp_path), 6, 0),
        _mixed_file(str(tmp_path), 5, 1),
        _mixed_file(str(tmp_path), 4, 2, reward_as_int=True),
    ]
    reader = SampleReader(str(tmp_path))
    alike = [files[0][5], files[1][0], files[0][1], files[1][4]]  # files of one layout: rows copied whole
    mixed = [files[0][5], files[1][0], files[0][1], files[2][3], files[1][4], files[0][1]]
    for ids in (alike, mixed):
        batch = reader.gather([split_data_id(i) for i in ids])
        expected = default_collate([reader.read(i) for i in ids])
        assert set(batch) == set(expected) == {'obs', 'action', 'done', 'env_id', 'reward', 'tag'}
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert batch[key].dtype == value.dtype and torch.equal(batch[key], value), key
            else:
                assert batch[key] == value, key
        assert batch['reward'].dtype == torch.float32 and batch['done'].dtype == torch.bool
    assert batch['tag'] == ['s0_5', 's1_0', 's0_1', 's2_3', 's1_4', 's0_1']


def test_gather_declines_files_that_do_not_form_one_batch(tmp_path):
    a = _write(str(tmp_path), 4, 0)
    b = save_samples(str(tmp_path), unique_stem('other'), [{'obs': torch.zeros(4), 'extra': torch.ones(2)}] * 2)
    reader = SampleReader(str(tmp_path))
    assert reader.gather([split_data_id(a[0]), split_data_id(b[0])]) is None  # different keys
    name = split_data_id(a[0])[0]
    try:
        reader.gather([(name, 4)])
    except IndexError as exc:
        assert name in str(exc)
    else:
        raise AssertionError('an index beyond the file was gathered')


def _cartpole_file(path_data, n, seed, reward_as_int=False):
    """Samples as a DQN collector writes them on CartPole: tensors, python bools and ints."""
    g = torch.Generator().manual_seed(seed)
    samples = [
        {
            'obs': torch.randn(4, generator=g),
            'next_obs': torch.randn(4, generator=g),
            'action': torch.randint(0, 2, (), generator=g),
            'reward': (1 if reward_as_int else 1.0) * (i % 3),
            'done': i % 7 == 6,
            'policy_iter': seed * 100 + i,
        }
        for i in range(n)
    ]
    return save_samples(path_data, unique_stem(f'cp{seed}'), samples)


def _assert_gathers_as_collated(reader, ids):
    batch = reader.gather([split_data_id(i) for i in ids])
    expected = default_collate([reader.read(i) for i in ids])
    assert batch is not None and set(batch) == set(expected)
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert batch[key].dtype == value.dtype and torch.equal(batch[key], value), key
            assert batch[key].is_contiguous(), key
        else:
            assert batch[key] == value, key


def _assert_stores_hold_cached_rows(reader):
    """Each cached file's stored rows equal its columns; evicted files are in no store."""
    stored = {}
    for store in reader._stores.values():
        assert store.dead * 2 <= store.used
        for entry in store.files:
            stored[id(entry)] = entry
            for key, column in store.columns.items():
                rows = torch.from_numpy(column[entry.base : entry.base + entry.n])
                assert torch.equal(rows, torch.as_tensor(entry.arrays()[key])), key
    cached = {id(entry) for entry in reader._cache.values()}
    assert set(stored) <= cached


def test_gather_across_many_files_gives_what_collating_gives(tmp_path):
    files = [_cartpole_file(str(tmp_path), 16 + f % 3, f) for f in range(24)]
    reader = SampleReader(str(tmp_path))
    rng = random.Random(0)
    for _ in range(30):
        ids = [rng.choice(rng.choice(files)) for _ in range(rng.randint(1, 64))]
        _assert_gathers_as_collated(reader, ids)
    _assert_stores_hold_cached_rows(reader)
    assert len(reader._stores) == 1  # one layout: every batch is one take per key


def test_gather_after_evictions(tmp_path):
    files = [_cartpole_file(str(tmp_path), 16, f) for f in range(12)]
    file_bytes = 16 * (4 * 4 * 2 + 8)  # obs, next_obs, action as loaded
    reader = SampleReader(str(tmp_path), cache_bytes=5 * file_bytes)
    rng = random.Random(1)
    for _step in range(80):
        chosen = rng.sample(files, rng.randint(1, 3))  # a few files a batch: gathers keep up with evictions
        ids = [rng.choice(rng.choice(chosen)) for _ in range(8)]
        _assert_gathers_as_collated(reader, ids)
        _assert_stores_hold_cached_rows(reader)
        assert reader._cached_bytes == sum(entry.nbytes for entry in reader._cache.values())
        # Beyond the bound only while the files of this batch, grown by their stored rows, are all cached.
        assert reader._cached_bytes <= 5 * file_bytes or len(reader._cache) <= len(chosen)
    assert len(reader._cache) < len(files)  # evictions happened (and with them rebuilds of the store)


def test_gather_of_files_of_different_layouts(tmp_path):
    path = str(tmp_path)
    files = [_cartpole_file(path, 10, f) for f in range(3)] + [_cartpole_file(path, 10, 3, reward_as_int=True)]
    tagged = _mixed_file(path, 6, 9)  # a string column: the other columns are stored, the strings collated
    reader = SampleReader(path)
    rng = random.Random(2)
    for _ in range(20):
        ids = [rng.choice(rng.choice(files)) for _ in range(12)]
        _assert_gathers_as_collated(reader, ids)  # int and float rewards give float32, as collate does
        _assert_gathers_as_collated(reader, [rng.choice(tagged) for _ in range(5)])
    assert len(reader._stores) == 3
    assert reader.gather([split_data_id(files[0][0]), split_data_id(tagged[0])]) is None  # different keys


def test_gather_raises_index_error_for_a_row_beyond_its_file(tmp_path):
    files = [_cartpole_file(str(tmp_path), 8, f) for f in range(3)]
    reader = SampleReader(str(tmp_path))
    _assert_gathers_as_collated(reader, files[0] + files[1] + files[2])  # all stored
    names = [split_data_id(ids[0])[0] for ids in files]
    for bad in (8, -1, 100):
        rows = [(names[0], 1), (names[2], bad), (names[1], 3)]
        try:
            reader.gather(rows)
        except IndexError as exc:
            assert f'{names[2]}#{bad}' in str(exc)
        else:
            raise AssertionError(f'index {bad} was gathered')


def test_gather_while_another_thread_reads_and_evicts(tmp_path):
    files = [_cartpole_file(str(tmp_path), 16, f) for f in range(10)]
    reader = SampleReader(str(tmp_path), cache_bytes=6 * 16 * (4 * 4 * 2 + 8))
    errors = []
    stop = threading.Event()

    def read_others():
        rng = random.Random(4)
        try:
            while not stop.is_set():
                data_id = rng.choice(rng.choice(files))
                assert reader.read(data_id)['obs'].shape == (4,)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    every_sample = SampleReader(str(tmp_path))  # the reference: its cache holds every file
    reader_thread = threading.Thread(target=read_others)
    reader_thread.start()
    try:
        rng = random.Random(3)
        for _ in range(300):
            chosen = rng.sample(files, 2)
            rows = [split_data_id(rng.choice(rng.choice(chosen))) for _ in range(16)]
            batch = reader.gather(rows)
            expected = default_collate([every_sample.read(f'{name}#{index}') for name, index in rows])
            for key, value in expected.items():
                assert torch.equal(batch[key], value), key
    finally:
        stop.set()
        reader_thread.join()
    assert not errors, errors
