"""``SampleReader`` keeps many sample files cached (a uniform replay buffer hits a new file on almost every
read), bounded by the bytes of their tensors, and evicts the least recently used first."""
import os

import torch

from ding.utils.file_transport import SampleReader, save_samples, unique_stem


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
