from collections import namedtuple

import numpy as np
import pytest
import torch

from ding.utils.collate import default_collate, default_decollate, to_device


def test_collate_typical_transitions():
    samples = [
        {
            'obs': np.full(4, i, dtype=np.float32),
            'next_obs': torch.full((4,), float(i)),
            'action': torch.tensor(i % 2),
            'reward': torch.tensor(1.0),
            'done': i == 2,
            'collect_iter': i,
            'replay_unique_id': f'id{i}',
            'info': None,
            'logit': {'mu': torch.zeros(1), 'sigma': torch.ones(1)},
        }
        for i in range(3)
    ]
    batch = default_collate(samples)
    assert batch['obs'].shape == (3, 4) and batch['obs'].dtype == torch.float32
    assert batch['next_obs'][2].tolist() == [2.0] * 4
    assert batch['action'].tolist() == [0, 1, 0] and batch['action'].dtype == torch.int64
    assert batch['reward'].shape == (3,)
    assert batch['done'].tolist() == [False, False, True] and batch['done'].dtype == torch.bool
    assert batch['collect_iter'].dtype == torch.int64
    assert batch['replay_unique_id'] == ['id0', 'id1', 'id2']
    assert batch['info'] == [None, None, None]
    assert batch['logit']['mu'].shape == (3, 1)


def test_collate_numbers_sequences_and_namedtuples():
    assert default_collate([1.5, 2.5]).dtype == torch.float32
    assert default_collate([np.float32(1), np.float32(2)]).tolist() == [1.0, 2.0]
    assert [t.tolist() for t in default_collate([[1, 2], [3, 4]])] == [[1, 3], [2, 4]]
    Point = namedtuple('Point', ['x', 'y'])
    p = default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert isinstance(p, Point) and p.x.tolist() == [1, 3] and p.y.tolist() == [2.0, 4.0]
    # dicts with differing keys and mixed-type lists stay plain lists
    assert default_collate([{'a': 1}, {'b': 2}]) == [{'a': 1}, {'b': 2}]
    assert default_collate([1, 'x']) == [1, 'x']


def test_collate_selected_keys_and_clear_errors():
    samples = [{'obs': torch.zeros(2), 'extra': 'x'}, {'obs': torch.ones(2), 'extra': 'y'}]
    assert set(default_collate(samples, keys=['obs'])) == {'obs'}
    with pytest.raises(KeyError, match="'reward'"):
        default_collate(samples, keys=['reward'])
    with pytest.raises(ValueError, match="'obs'"):
        default_collate([{'obs': torch.zeros(2)}, {'obs': torch.zeros(3)}])
    with pytest.raises(ValueError, match='empty'):
        default_collate([])


def test_decollate_and_to_device_round_trip():
    batch = {'action': torch.tensor([1, 0]), 'logit': {'mu': torch.zeros(2, 1)}}
    items = default_decollate(batch)
    assert len(items) == 2 and items[0]['action'].item() == 1 and items[1]['logit']['mu'].shape == (1,)
    moved = to_device({'a': torch.zeros(1), 'b': [torch.ones(1), 'text'], 'c': 3}, 'cpu')
    assert moved['b'][1] == 'text' and moved['c'] == 3 and moved['a'].device.type == 'cpu'
