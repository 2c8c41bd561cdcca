"""Checkpoints stored under a ckpt_uri: a local directory, and S3 through a real moto server on 127.0.0.1."""

import json
import os
import uuid

import pytest
import torch

from ding.utils.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ding.utils.checkpoint_settings import CheckpointSettings, checkpoint_problems
from ding.utils.object_store import ObjectStore, ObjectStoreError, uri_problem
from ding.utils.remote_checkpoint import LATEST_NAME, MANIFEST_NAME, RemoteCheckpoints, fetch_if_newer
from tests.helpers.moto_s3 import BUCKET, s3  # noqa: F401 - the fixture


def _state(it: int) -> dict:
    torch.manual_seed(it)
    return {'model': {'w': torch.randn(64, 32), 'b': torch.randn(32)}, 'last_iter': it, 'last_step': it * 10}


def _store_checkpoints(remote: RemoteCheckpoints, local_dir, iterations, best_at=()) -> None:
    for it in iterations:
        name = 'ckpt_best' if it in best_at else f'iteration_{it}'
        path = save_checkpoint(os.path.join(local_dir, name), _state(it))
        record = {'name': name, 'iteration': it, 'envstep': it * 10, 'kind': 'best' if it in best_at else 'periodic'}
        if it in best_at:
            record['eval_return'] = float(it)
        record['replay_cursor'] = {'train_iter': it, 'last_sampled_ids': [f'buffer_{it}']}
        remote.commit(remote.upload(path, record), {'exp_name': 'unit', 'config': {'seed': 0}})


def test_a_local_ckpt_uri_keeps_keep_n_plus_the_best_with_manifest_and_latest(tmp_path):
    settings = CheckpointSettings(ckpt_uri=str(tmp_path / 'store'), keep_n=2, compression='zstd', shard_mb=0.004)
    remote = RemoteCheckpoints(settings)
    _store_checkpoints(remote, tmp_path / 'ckpt', [10, 20, 25, 30, 40], best_at=(20, 25))

    manifest = json.loads((tmp_path / 'store' / MANIFEST_NAME).read_text())
    assert [e['key'] for e in manifest['checkpoints']] == ['ckpt_best-25', 'iteration_30', 'iteration_40']
    assert manifest['latest'] == 'iteration_40' and manifest['best'] == 'ckpt_best-25'
    assert manifest['config'] == {'seed': 0} and manifest['exp_name'] == 'unit'
    assert manifest['checkpoint_format_version'] == 1
    newest = manifest['checkpoints'][-1]
    assert newest['replay_cursor']['last_sampled_ids'] == ['buffer_40']
    assert len(newest['shards']) > 1 and all(s['file'].endswith('.zst') for s in newest['shards'])
    assert newest['stored_bytes'] < newest['size_bytes']  # random floats still compress a little (headers)
    assert sorted(os.listdir(tmp_path / 'store' / 'checkpoints')) == ['ckpt_best-25', 'iteration_30', 'iteration_40']
    assert json.loads((tmp_path / 'store' / LATEST_NAME).read_text())['checkpoint'] == 'iteration_40'

    got = fetch_if_newer(settings, str(tmp_path / 'fresh'), than_iter=-1)
    assert got is not None and got['path'] == str(tmp_path / 'fresh' / 'iteration_40.safetensors')
    assert torch.equal(load_checkpoint(got['path'])['model']['w'], _state(40)['model']['w'])
    assert fetch_if_newer(settings, str(tmp_path / 'fresh2'), than_iter=40) is None


def test_a_corrupt_shard_is_refused_on_download(tmp_path):
    settings = CheckpointSettings(ckpt_uri=str(tmp_path / 'store'), shard_mb=0.004)
    remote = RemoteCheckpoints(settings)
    _store_checkpoints(remote, tmp_path / 'ckpt', [10])
    shard = tmp_path / 'store' / 'checkpoints' / 'iteration_10' / 'shard-00001'
    shard.write_bytes(b'x' + shard.read_bytes()[1:])
    with pytest.raises(CheckpointError, match='shard-00001.*corrupt'):
        fetch_if_newer(settings, str(tmp_path / 'fresh'))


def test_s3_checkpoints_on_a_real_s3_server(s3, tmp_path):  # noqa: F811
    uri = f's3://{BUCKET}/{uuid.uuid4().hex}'
    settings = CheckpointSettings(ckpt_uri=uri, keep_n=1, compression='zstd', shard_mb=0.004, max_parallel=3)
    remote = RemoteCheckpoints(settings)
    _store_checkpoints(remote, tmp_path / 'ckpt', [1, 2])
    prefix = uri.split(f'{BUCKET}/', 1)[1]
    keys = s3.keys(prefix)
    assert f'{prefix}/{MANIFEST_NAME}' in keys and f'{prefix}/{LATEST_NAME}' in keys
    assert not any('/iteration_1/' in k for k in keys)  # pruned to keep_n=1
    assert f'{prefix}/checkpoints/iteration_2/iteration_2.manifest.json' in keys
    manifest = json.loads(s3.read(f'{prefix}/{MANIFEST_NAME}'))
    assert manifest['checkpoints'][0]['uri'] == f'{uri}/checkpoints/iteration_2'

    got = fetch_if_newer(settings, str(tmp_path / 'fresh'))
    assert got is not None and load_checkpoint(got['path'])['last_iter'] == 2


def test_an_s3_outage_fails_within_seconds_naming_the_uri(s3, tmp_path):  # noqa: F811
    store = ObjectStore(f's3://{BUCKET}/outage')
    store.put('a', b'123')
    s3.stop()
    with pytest.raises(ObjectStoreError, match=f's3://{BUCKET}/outage/b'):
        store.put('b', b'456')


def test_bad_locations_and_settings_are_named():
    assert 'unsupported URL scheme' in uri_problem('ftp://host/x')
    assert 'names no bucket' in uri_problem('s3://')
    assert uri_problem('s3://bucket/prefix') is None and uri_problem('./exp/remote') is None
    assert checkpoint_problems({'ckpt_uri': 'http://x'})[0].startswith('policy.learn.learner.checkpoint.ckpt_uri:')
    # parallel mode's learners each get their own prefix, as they get their own local directory
    assert CheckpointSettings(ckpt_uri='s3://b/run/').for_instance('learner1').ckpt_uri == 's3://b/run/learner1'
    assert CheckpointSettings(ckpt_uri='s3://b/run').for_instance('learner').ckpt_uri == 's3://b/run'
    with pytest.raises(ValueError, match='on_stall'):
        CheckpointSettings.from_config({'on_stall': 'wait'})
    with pytest.raises(ValueError, match='keep_n'):
        CheckpointSettings.from_config({'keep_n': 0})
