"""The one safetensors codec: weights payloads, checkpoints and policy files agree on the bytes."""

import json

import pytest
import safetensors.torch as st
import torch

from ding.utils.checkpoint import load_checkpoint, save_checkpoint
from ding.utils.file_transport import load_policy, save_policy
from ding.utils.state_dict_codec import (
    WEIGHTS_FORMAT,
    CodecError,
    WeightsError,
    decode_tensors,
    deserialize_weights,
    read_metadata,
    serialize_weights,
    storable_dtype,
)


def test_weights_payload_is_plain_safetensors_with_flat_keys():
    fc = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    payload = serialize_weights({'model': {'fc.weight': fc, 'fc.bias': torch.zeros(2)}}, version=7)
    # What safetensors itself writes for the flat dict: the wire format did not change. (Not compared byte for
    # byte: safetensors orders the metadata entries of its header differently from one call to the next.)
    expected = st.save(
        {'model/fc.weight': fc, 'model/fc.bias': torch.zeros(2)}, metadata={'format': WEIGHTS_FORMAT, 'version': '7'}
    )
    assert len(payload) == len(expected) and read_metadata(payload) == read_metadata(expected)
    flat = st.load(payload)
    assert sorted(flat) == ['model/fc.bias', 'model/fc.weight'] and torch.equal(flat['model/fc.weight'], fc)
    state, meta = deserialize_weights(payload)
    assert meta == {'format': WEIGHTS_FORMAT, 'version': '7'}
    assert torch.equal(state['model']['fc.weight'], fc)


def test_tied_and_shared_tensors_are_stored_as_copies_in_weights():
    base = torch.arange(8, dtype=torch.float32)
    state, _ = deserialize_weights(serialize_weights({'a': base, 'b': base, 'half': base[:4]}, 1))
    assert torch.equal(state['a'], base) and torch.equal(state['b'], base) and torch.equal(state['half'], base[:4])


def test_bad_payloads_are_refused_with_a_reason():
    with pytest.raises(CodecError):
        decode_tensors(b'not safetensors at all')
    with pytest.raises(WeightsError, match='not a valid safetensors'):
        deserialize_weights(b'\x00' * 16)
    other = st.save({'x': torch.ones(1)}, metadata={'format': 'something-else'})
    with pytest.raises(WeightsError, match='something-else'):
        deserialize_weights(other)


def test_storable_dtype_asks_safetensors():
    assert storable_dtype(torch.float32) and storable_dtype(torch.bfloat16) and storable_dtype(torch.bool)
    assert not storable_dtype(torch.complex128)


def test_checkpoint_refuses_an_unstorable_dtype_naming_the_key(tmp_path):
    with pytest.raises(TypeError, match="complex128 at key 'model/z'"):
        save_checkpoint(tmp_path / 'c', {'model': {'z': torch.zeros(2, dtype=torch.complex128)}})


def test_checkpoint_and_policy_files_go_through_the_codec(tmp_path):
    fc = torch.randn(3, 2)
    path = save_checkpoint(tmp_path / 'ckpt', {'model': {'fc': fc}, 'last_iter': 5, 'betas': (0.9, 0.99)})
    with open(path, 'rb') as f:
        data = f.read()
    tensors, meta = decode_tensors(data)
    assert meta == read_metadata(data)
    assert json.loads(meta['ding_meta'])['last_iter'] == 5 and torch.equal(tensors['model/fc'], fc)
    loaded = load_checkpoint(path)
    assert torch.equal(loaded['model']['fc'], fc) and loaded['betas'] == (0.9, 0.99)

    policy_path = save_policy(str(tmp_path / 'policy'), 'learner0', {'fc': fc}, 12)
    state, policy_iter = load_policy(policy_path)
    assert policy_iter == 12 and torch.equal(state['fc'], fc)
