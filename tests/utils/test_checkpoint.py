import copy
import hashlib
import json
import os
import random
import time

import numpy as np
import pytest
import torch
import torch.nn as nn

from ding.utils.checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    META_KEY,
    CheckpointError,
    config_hash,
    get_rng_state,
    latest_valid_checkpoint,
    list_checkpoints,
    load_checkpoint,
    manifest_path,
    prune_checkpoints,
    read_file,
    read_manifest,
    save_checkpoint,
    save_file,
    set_rng_state,
    verify_checkpoint,
)
from ding.utils.state_dict_codec import encode_tensors


def make_net() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))


def train_steps(net: nn.Module, opt: torch.optim.Optimizer, batches) -> None:
    for x, y in batches:
        opt.zero_grad()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()


def make_batches(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 8, generator=g), torch.randn(16, 2, generator=g)) for _ in range(n)]


def flip_byte(path: str, offset: int) -> None:
    with open(path, 'r+b') as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def test_resume_training_matches_uninterrupted_run(tmp_path):
    torch.manual_seed(0)
    net = make_net()
    target = copy.deepcopy(net)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    train_steps(net, opt, make_batches(3, seed=1))
    state = {
        'model': net.state_dict(),
        'target_model': target.state_dict(),
        'optimizer': opt.state_dict(),
        'last_iter': 3,
        'last_step': 48,
    }
    path = save_checkpoint(str(tmp_path / 'ckpt' / 'iteration_3'), state, config_hash=config_hash({'lr': 1e-2}))
    assert path == str(tmp_path / 'ckpt' / 'iteration_3.safetensors')

    loaded = load_checkpoint(path)
    assert loaded['last_iter'] == 3 and loaded['last_step'] == 48
    assert loaded['optimizer']['param_groups'] == opt.state_dict()['param_groups']
    assert sorted(loaded['optimizer']['state']) == [0, 1, 2, 3]  # int keys stay ints

    # A fresh learner built from the file ...
    net2, target2 = make_net(), make_net()
    opt2 = torch.optim.Adam(net2.parameters(), lr=1e-2)
    net2.load_state_dict(loaded['model'])
    target2.load_state_dict(loaded['target_model'])
    opt2.load_state_dict(loaded['optimizer'])
    for a, b in zip(target.state_dict().values(), target2.state_dict().values()):
        assert torch.equal(a, b)

    # ... continues exactly like the run that never stopped.
    more = make_batches(4, seed=2)
    train_steps(net, opt, more)
    train_steps(net2, opt2, more)
    for (name, a), b in zip(net.state_dict().items(), net2.state_dict().values()):
        assert torch.equal(a, b), name


def test_nested_python_values_round_trip(tmp_path):
    state = {
        'last_iter': 7,
        'ints': {0: {'step': torch.tensor(3.0)}, 10: [1, 2]},
        'mixed_keys': {1.5: 'a', None: 'b', True: 'c', (1, 'x'): 'd'},
        'list': [1, 'two', None, True, 2.5, [torch.arange(3)], {'k': False}],
        'tuple': (0.9, 0.999),
        'str': 'hello',
        'none': None,
        'bool': False,
        'float': -1.25,
        'big_int': 2**70,
        'nonfinite': [float('inf'), float('-inf')],
        'empty': {},
        'empty_list': [],
        'empty_tensor': torch.zeros(0, 4),
        'int_tensor': torch.arange(6, dtype=torch.int32).reshape(2, 3),
        'bool_tensor': torch.tensor([True, False]),
        'scalar_tensor': torch.tensor(1.5, dtype=torch.float64),
        'ndarray': np.arange(5, dtype=np.float32),
        'np_scalar': np.int64(4),
        'raw': b'\x00\x01bytes',
        'key/with/slash': torch.ones(2),
        'key': {'with': {'slash': torch.zeros(2)}},  # same tensor name as above: must not collide
        '__metadata__': torch.ones(1),
    }
    out = load_checkpoint(save_checkpoint(str(tmp_path / 'nested'), state))

    assert set(out) == set(state)
    assert out['ints'][0]['step'].item() == 3.0 and out['ints'][10] == [1, 2]
    assert out['mixed_keys'] == state['mixed_keys']
    assert out['list'][:5] == [1, 'two', None, True, 2.5]
    assert torch.equal(out['list'][5][0], torch.arange(3)) and out['list'][6] == {'k': False}
    assert out['tuple'] == (0.9, 0.999) and isinstance(out['tuple'], tuple)
    for k in ('str', 'none', 'bool', 'float', 'big_int', 'nonfinite', 'empty', 'empty_list'):
        assert out[k] == state[k], k
    assert out['empty_tensor'].shape == (0, 4)
    for k in ('int_tensor', 'bool_tensor', 'scalar_tensor', 'key/with/slash', '__metadata__'):
        assert out[k].dtype == state[k].dtype and torch.equal(out[k], state[k]), k
    assert torch.equal(out['key']['with']['slash'], torch.zeros(2))
    assert isinstance(out['ndarray'], np.ndarray) and np.array_equal(out['ndarray'], state['ndarray'])
    assert out['np_scalar'] == 4
    assert out['raw'] == state['raw']


def test_nan_float_round_trips(tmp_path):
    out = load_checkpoint(save_checkpoint(str(tmp_path / 'nan'), {'x': float('nan')}))
    assert np.isnan(out['x'])


class Counter:
    """Any object with state_dict() is saved through it."""

    def __init__(self):
        self.count = 5
        self.history = torch.tensor([1.0, 2.0])

    def state_dict(self):
        return {'count': self.count, 'history': self.history}


def test_objects_with_state_dict_are_saved_through_it(tmp_path):
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    train_steps(net, opt, make_batches(1, seed=0))
    path = save_checkpoint(str(tmp_path / 'objs'), {'model': net, 'optimizer': opt, 'counter': Counter()})
    out = load_checkpoint(path)

    assert out['counter']['count'] == 5 and torch.equal(out['counter']['history'], torch.tensor([1.0, 2.0]))
    for (k, a), b in zip(net.state_dict().items(), out['model'].values()):
        assert torch.equal(a, b), k
    opt2 = torch.optim.SGD(make_net().parameters(), lr=0.1, momentum=0.9)
    opt2.load_state_dict(out['optimizer'])
    assert opt2.state_dict()['param_groups'] == opt.state_dict()['param_groups']


def test_unsupported_value_error_names_the_key(tmp_path):
    with pytest.raises(TypeError, match=r'optimizer/state/0/bad'):
        save_checkpoint(str(tmp_path / 'bad'), {'optimizer': {'state': {0: {'bad': {1, 2}}}}})
    with pytest.raises(TypeError, match=r'fn'):
        save_checkpoint(str(tmp_path / 'bad'), {'fn': lambda: 0})
    assert os.listdir(tmp_path) == []  # nothing half-written


def test_tied_and_view_tensors_are_saved(tmp_path):
    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight  # tied weights: two names, one tensor
    model = nn.ModuleDict({'emb': emb, 'head': head})
    base = torch.arange(12.0)
    state = {'model': model.state_dict(), 'view_a': base[:6], 'view_b': base[6:], 'strided': base.view(3, 4).t()}
    out = load_checkpoint(save_checkpoint(str(tmp_path / 'tied'), state))

    assert torch.equal(out['model']['emb.weight'], emb.weight.detach())
    assert out['model']['emb.weight'] is out['model']['head.weight']  # still tied, stored once
    assert len(read_manifest(tmp_path / 'tied')['tensors']) == 4
    assert torch.equal(out['view_a'], base[:6]) and torch.equal(out['view_b'], base[6:])
    assert torch.equal(out['strided'], base.view(3, 4).t())
    fresh = nn.ModuleDict({'emb': nn.Embedding(10, 4), 'head': nn.Linear(4, 10, bias=False)})
    fresh.load_state_dict(out['model'])


def test_manifest_describes_the_file(tmp_path):
    before = time.time()
    path = save_checkpoint(
        str(tmp_path / 'iteration_100.safetensors'),
        {'model': {'w': torch.zeros(3, 2, dtype=torch.float16)}, 'last_iter': 100, 'last_step': 5000},
        config_hash='abc',
    )
    assert path == str(tmp_path / 'iteration_100.safetensors')
    assert manifest_path(path) == str(tmp_path / 'iteration_100.manifest.json')
    assert manifest_path(str(tmp_path / 'iteration_100')) == manifest_path(path)
    with open(manifest_path(path)) as f:
        manifest = json.load(f)
    assert manifest == read_manifest(path) == verify_checkpoint(path)
    assert manifest['format_version'] == CHECKPOINT_FORMAT_VERSION
    assert manifest['file'] == 'iteration_100.safetensors'
    assert manifest['size_bytes'] == os.path.getsize(path)
    assert manifest['tensors'] == {'model/w': {'shape': [3, 2], 'dtype': 'float16'}}
    assert (manifest['last_iter'], manifest['last_step'], manifest['config_hash']) == (100, 5000, 'abc')
    assert before <= manifest['wall_time'] <= time.time()
    assert manifest['created'].startswith(time.strftime('%Y', time.gmtime(manifest['wall_time'])))
    # DI-engine-named aliases
    assert save_file(str(tmp_path / 'alias'), {'a': 1}) == str(tmp_path / 'alias.safetensors')
    assert read_file(str(tmp_path / 'alias')) == {'a': 1}


def test_corrupted_byte_is_refused(tmp_path):
    path = save_checkpoint(str(tmp_path / 'iteration_1'), {'model': make_net().state_dict()})
    flip_byte(path, os.path.getsize(path) - 10)  # inside the tensor data
    with pytest.raises(CheckpointError, match='sha256 mismatch') as e:
        load_checkpoint(path)
    assert path in str(e.value)
    with pytest.raises(CheckpointError, match='sha256 mismatch'):
        verify_checkpoint(path)


def _rewrite_data(path: str, data: bytes) -> None:
    """Replace a checkpoint's data file and make its manifest agree (as a foreign writer would)."""
    with open(path, 'wb') as f:
        f.write(data)
    with open(manifest_path(path)) as f:
        manifest = json.load(f)
    manifest.update(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
    with open(manifest_path(path), 'w') as f:
        json.dump(manifest, f)


@pytest.mark.parametrize('depth', [1_000, 200_000])
def test_deeply_nested_metadata_is_a_checkpoint_error_naming_the_file(tmp_path, depth):
    path = save_checkpoint(str(tmp_path / 'iteration_1'), {'a': 1})
    deep = '{"format_version": 1, "state": ' + '{"k": ' * depth + '1' + '}' * depth + '}'
    _rewrite_data(path, encode_tensors({}, {META_KEY: deep, 'format_version': '1'}))
    with pytest.raises(CheckpointError, match='nested too deeply') as e:
        load_checkpoint(path)
    assert path in str(e.value)


def test_deeply_nested_manifest_is_a_checkpoint_error_naming_the_file(tmp_path):
    path = save_checkpoint(str(tmp_path / 'iteration_1'), {'a': 1})
    with open(manifest_path(path), 'w') as f:
        f.write('[' * 100_000 + ']' * 100_000)
    with pytest.raises(CheckpointError, match='nested too deeply') as e:
        load_checkpoint(path)
    assert manifest_path(path) in str(e.value)


def test_truncated_file_is_refused(tmp_path):
    path = save_checkpoint(str(tmp_path / 'iteration_1'), {'model': make_net().state_dict()})
    with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(CheckpointError, match='truncated') as e:
        load_checkpoint(str(tmp_path / 'iteration_1'))
    assert path in str(e.value)


def test_missing_manifest_means_incomplete(tmp_path):
    path = save_checkpoint(str(tmp_path / 'iteration_1'), {'x': torch.ones(2)})
    os.remove(manifest_path(path))
    with pytest.raises(CheckpointError, match='manifest missing') as e:
        load_checkpoint(path)
    assert path in str(e.value)
    with pytest.raises(CheckpointError, match='not found'):
        load_checkpoint(str(tmp_path / 'never_saved'))


def test_atomic_write_leaves_no_temp_files(tmp_path):
    path = save_checkpoint(str(tmp_path / 'iteration_1'), {'x': torch.ones(2)})
    path = save_checkpoint(str(tmp_path / 'iteration_1'), {'x': torch.zeros(2)})  # overwrite in place
    assert sorted(os.listdir(tmp_path)) == ['iteration_1.manifest.json', 'iteration_1.safetensors']
    assert torch.equal(load_checkpoint(path)['x'], torch.zeros(2))

    # A rename that fails (the target is a non-empty directory) cleans its temp file up.
    blocked = tmp_path / 'iteration_2.safetensors'
    blocked.mkdir()
    (blocked / 'keep').write_text('x')
    with pytest.raises(OSError):
        save_checkpoint(str(tmp_path / 'iteration_2'), {'x': torch.ones(2)})
    assert sorted(os.listdir(tmp_path)) == [
        'iteration_1.manifest.json',
        'iteration_1.safetensors',
        'iteration_2.safetensors',
    ]


def test_list_and_prune_keep_newest_and_best(tmp_path):
    for it in (1, 2, 10, 20, 100):
        save_checkpoint(str(tmp_path / f'iteration_{it}'), {'last_iter': it})
    save_checkpoint(str(tmp_path / 'ckpt_best'), {'last_iter': 2})
    names = [os.path.basename(p) for p in list_checkpoints(str(tmp_path))]
    assert names == [f'iteration_{i}.safetensors' for i in (1, 2, 10, 20, 100)]  # numeric, not text, order

    deleted = prune_checkpoints(str(tmp_path), keep_n=2)
    assert [os.path.basename(p) for p in deleted] == [
        'iteration_1.safetensors',
        'iteration_2.safetensors',
        'iteration_10.safetensors',
    ]
    assert sorted(os.listdir(tmp_path)) == sorted(
        [
            'ckpt_best.safetensors',
            'ckpt_best.manifest.json',
            'iteration_20.safetensors',
            'iteration_20.manifest.json',
            'iteration_100.safetensors',
            'iteration_100.manifest.json',
        ]
    )
    assert prune_checkpoints(str(tmp_path), keep_n=2) == []
    assert load_checkpoint(str(tmp_path / 'ckpt_best'))['last_iter'] == 2
    assert list_checkpoints(str(tmp_path / 'no_such_dir')) == []


def test_latest_valid_checkpoint_skips_bad_ones(tmp_path):
    assert latest_valid_checkpoint(str(tmp_path)) is None
    for it in (10, 20, 30):
        save_checkpoint(str(tmp_path / f'iteration_{it}'), {'last_iter': it, 'w': torch.randn(4)})
    assert latest_valid_checkpoint(str(tmp_path)) == str(tmp_path / 'iteration_30.safetensors')

    flip_byte(str(tmp_path / 'iteration_30.safetensors'), os.path.getsize(tmp_path / 'iteration_30.safetensors') - 1)
    assert latest_valid_checkpoint(str(tmp_path)) == str(tmp_path / 'iteration_20.safetensors')

    os.remove(manifest_path(str(tmp_path / 'iteration_20')))  # an interrupted save
    assert latest_valid_checkpoint(str(tmp_path)) == str(tmp_path / 'iteration_10.safetensors')


def test_di_engine_pth_tar_loads(tmp_path):
    net = make_net()
    opt = torch.optim.Adam(net.parameters())
    train_steps(net, opt, make_batches(1, seed=0))
    path = str(tmp_path / 'iteration_200.pth.tar')
    torch.save({'model': net.state_dict(), 'optimizer': opt.state_dict(), 'last_iter': 200, 'last_step': 9}, path)

    out = load_checkpoint(path)
    assert out['last_iter'] == 200 and out['last_step'] == 9
    net2 = make_net()
    net2.load_state_dict(out['model'])
    torch.optim.Adam(net2.parameters()).load_state_dict(out['optimizer'])
    for a, b in zip(net.parameters(), net2.parameters()):
        assert torch.equal(a, b)


class Payload:
    """Stands for any class a malicious or careless pickle could carry."""

    def __init__(self):
        self.note = 'not a tensor'


def test_pth_tar_with_arbitrary_object_is_refused(tmp_path):
    path = str(tmp_path / 'evil.pth.tar')
    torch.save({'model': {'w': torch.ones(1)}, 'extra': Payload()}, path)
    with pytest.raises(CheckpointError, match='refused') as e:
        load_checkpoint(path)
    assert path in str(e.value)

    garbage = str(tmp_path / 'garbage.pth')
    with open(garbage, 'wb') as f:
        f.write(b'not a torch file at all')
    with pytest.raises(CheckpointError, match='garbage.pth'):
        load_checkpoint(garbage)


def test_rng_state_round_trips_through_a_file(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.random(), np.random.randn(), torch.randn(1)  # move away from the seeded start
    np.random.standard_normal()  # leaves a cached gaussian in numpy's legacy state
    path = save_checkpoint(str(tmp_path / 'rng'), {'rng': get_rng_state()})

    def draw():
        return [random.random(), random.gauss(0, 1)], np.random.randn(3).tolist(), torch.rand(3).tolist()

    expected = draw()
    draw()  # the generators move on
    set_rng_state(load_checkpoint(path)['rng'])
    assert draw() == expected


def test_config_hash_is_stable():
    a = {'policy': {'learn': {'lr': 1e-3, 'batch_size': 64}}, 'seed': 0, 'env': {1: 'x'}}
    b = {'seed': 0, 'env': {1: 'x'}, 'policy': {'learn': {'batch_size': 64, 'lr': 1e-3}}}
    assert config_hash(a) == config_hash(b)
    assert len(config_hash(a)) == 64
    b['policy']['learn']['lr'] = 1e-4
    assert config_hash(a) != config_hash(b)


def test_map_location_moves_tensors_but_keeps_numpy_on_host(tmp_path):
    emb = nn.Embedding(3, 2)
    path = save_checkpoint(str(tmp_path / 'loc'), {'a': emb.weight, 'b': emb.weight, 'np': np.ones(2), 'n': 1})
    # 'meta' is a device every torch build has; it stands in for 'cuda' on a CPU-only machine.
    out = load_checkpoint(path, map_location='meta')
    assert out['a'].device.type == 'meta' and out['a'] is out['b']
    assert isinstance(out['np'], np.ndarray) and out['n'] == 1
    assert load_checkpoint(path, map_location=torch.device('cpu'))['a'].device.type == 'cpu'


def test_prune_keeps_everything_while_fewer_than_keep_n_exist(tmp_path):
    for it in (10, 20, 30):
        save_checkpoint(str(tmp_path / f'iteration_{it}'), {'last_iter': it, 'w': torch.zeros(2)})
    assert prune_checkpoints(str(tmp_path), keep_n=5) == []
    assert len(list_checkpoints(str(tmp_path))) == 3


def test_durable_false_skips_the_fsyncs_but_writes_the_same_verified_files(tmp_path, monkeypatch):
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, 'fsync', lambda fd: (calls.append(fd), real_fsync(fd))[1])
    state = {'model': {'w': torch.arange(6.0).reshape(2, 3)}, 'last_iter': 7}

    durable = save_checkpoint(str(tmp_path / 'durable'), state)
    assert len(calls) == 3  # data file, manifest, directory
    calls.clear()
    transfer = save_checkpoint(str(tmp_path / 'transfer'), state, durable=False)
    assert calls == []

    for path in (durable, transfer):
        loaded = load_checkpoint(path)
        assert torch.equal(loaded['model']['w'], state['model']['w']) and loaded['last_iter'] == 7
    assert sorted(os.listdir(tmp_path)) == [
        'durable.manifest.json',
        'durable.safetensors',
        'transfer.manifest.json',
        'transfer.safetensors',
    ]
