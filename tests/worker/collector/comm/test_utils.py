"""The comm collector's file helpers on real policy and sample files."""

import os

import pytest
import torch

from ding.utils.checkpoint import CheckpointError, manifest_path, save_checkpoint
from ding.utils.file_transport import save_policy, save_samples
from ding.worker.collector.comm import PolicyFileWatcher, create_comm_collector
from ding.worker.collector.comm.utils import file_prefix, policy_file_path, remove_sample_files


def _weights(value: float):
    return {'fc.weight': torch.full((2, 3), value), 'fc.bias': torch.zeros(2)}


def test_watcher_reads_each_version_once(tmp_path):
    path = str(tmp_path / 'policy_learner0.safetensors')
    watcher = PolicyFileWatcher()

    with pytest.raises(FileNotFoundError, match='not found') as missing:
        watcher.poll(path)
    assert path in str(missing.value)
    assert watcher.poll(path) is None  # still missing: reported once

    save_policy(str(tmp_path), 'policy_learner0', _weights(1.0), 3)
    info = watcher.poll(path)
    assert info['iter'] == 3
    torch.testing.assert_close(info['model'], _weights(1.0))
    assert watcher.poll(path) is None  # unchanged

    save_policy(str(tmp_path), 'policy_learner0', _weights(2.0), 4)
    assert watcher.poll(path)['iter'] == 4

    # A corrupt version raises once (naming the file), then waits for the next write.
    with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) - 1)
    with pytest.raises(CheckpointError, match='truncated') as exc:
        watcher.poll(path)
    assert path in str(exc.value)
    assert watcher.poll(path) is None
    save_policy(str(tmp_path), 'policy_learner0', _weights(3.0), 5)
    assert watcher.poll(path)['iter'] == 5

    # A new task reads whatever is there again.
    watcher.forget()
    assert watcher.poll(path)['iter'] == 5


def test_watcher_reads_one_rename_versions_and_the_older_pair(tmp_path):
    """A policy file is one file published with one rename: each version reads alone, whatever lies beside it;
    the older data + manifest pair (a checkpoint holding 'model' and 'policy_iter') still reads."""
    path = str(tmp_path / 'p.safetensors')
    save_checkpoint(str(tmp_path / 'p'), {'model': _weights(1.0), 'policy_iter': 1})
    watcher = PolicyFileWatcher()
    assert watcher.poll(path)['iter'] == 1

    save_policy(str(tmp_path / 'new'), 'p', _weights(2.0), 2)
    assert os.listdir(tmp_path / 'new') == ['p.safetensors']  # no manifest: the header carries the sha256
    os.replace(tmp_path / 'new' / 'p.safetensors', path)  # the old manifest is still there
    info = watcher.poll(path)
    assert info['iter'] == 2
    torch.testing.assert_close(info['model'], _weights(2.0))
    save_policy(str(tmp_path), 'p', _weights(3.0), 3)
    assert not os.path.exists(manifest_path(path))  # publishing removes the stale manifest
    assert watcher.poll(path)['iter'] == 3


def test_policy_file_path_and_file_prefix(tmp_path):
    assert policy_file_path('/x/policy_a.safetensors', 'policy_b', '/d') == '/x/policy_a.safetensors'
    assert policy_file_path('/x', 'policy_b', '/d') == os.path.join('/x', 'policy_b.safetensors')
    assert policy_file_path(None, None, '/d') == os.path.join('/d', 'policy_learner0.safetensors')
    assert file_prefix('collector0', 'collector_task_2024/../x y') == 'collector0_collector_task_2024-..-x-y'
    assert not file_prefix('..', 'hidden').startswith('.')


def test_remove_sample_files(tmp_path):
    ids_a = save_samples(str(tmp_path), 'a', [{'x': torch.zeros(2)}] * 3)
    ids_b = save_samples(str(tmp_path), 'b', [{'x': torch.ones(2)}])
    assert remove_sample_files(str(tmp_path), ids_a + ['malformed', 'gone.safetensors#0']) == 1
    assert sorted(os.listdir(tmp_path)) == sorted(['b.safetensors', 'b.manifest.json'])
    assert ids_b == ['b.safetensors#0']


def test_create_comm_collector_builds_the_registered_type(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    comm = create_comm_collector(dict(type='flask_fs', name='collector3', exp_name='exp', port=0, queue_size=2))
    try:
        assert type(comm).__name__ == 'FlaskFileSystemCollector'
        comm.start()
        assert comm.port > 0 and comm.slave.ping()
    finally:
        comm.close()
    with pytest.raises(ValueError, match='queue_size'):
        create_comm_collector(dict(type='flask_fs', queue_size=0))
    with pytest.raises(KeyError, match='no_such_comm'):
        create_comm_collector(dict(type='no_such_comm'))
