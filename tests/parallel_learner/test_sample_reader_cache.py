"""``SampleReader`` keeps many sample files cached (a uniform replay buffer hits a new file on almost every
read), bounded by the bytes of their tensors, and evicts the least recently used first."""
import os

import torch

from ding.utils.collate import default_collate
from ding.utils.file_transport import SampleReader, save_samples, split_data_id, unique_stem


def _write(path_data, n, value):
    return save_samples(path_data, unique_stem('s'), [{'obs': torch.full((4, ), float(value) + i)} for i in range(n)])


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
    samples = [{'obs': torch.randn(3, generator=g), 'action': torch.randint(0, 4, (), generator=g),
                'done': i % 3 == 0, 'env_id': i, 'reward': (i if reward_as_int else i + 0.5), 'tag': f's{seed}_{i}'}
               for i in range(n)]
    return save_samples(path_data, unique_stem('mixed'), samples)


def test_gather_gives_what_collating_the_samples_gives(tmp_path):
    # The third file's rewards are ints: mixed with the others' floats they collate to float32, as one list would.
    files = [_mixed_file(str(tmp_path), 6, 0), _mixed_file(str(tmp_path), 5, 1),
             _mixed_file(str(tmp_path), 4, 2, reward_as_int=True)]
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
