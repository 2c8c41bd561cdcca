import pytest
import torch

from ding.interaction.replay.codec import EncodingError, batch_encoding, decode_batch, encode_batch, unstack
from ding.interaction.replay.v1 import replay_pb2


def transitions(n=5):
    return [
        {
            'obs': torch.arange(4, dtype=torch.float32) + i,
            'action': torch.tensor(i % 2),
            'logit': torch.tensor([0.25, -1.5], dtype=torch.float64),  # travels as packed f32
            'reward': 1.0,
            'done': i == n - 1,
            'info': None,  # left out
        }
        for i in range(n)
    ]


def test_round_trip_keeps_values_dtypes_and_shapes():
    batch = encode_batch(transitions())
    assert batch.size == 5
    assert {f.name: (f.dtype, list(f.shape)) for f in batch.fields} == {
        'obs': ('float32', [4]),
        'action': ('int64', []),
        'logit': ('float32', [2]),
        'reward': ('float32', []),
        'done': ('bool', []),
    }
    # the wire format is little-endian: the int64 action 1 of item 1 is bytes 8..15
    action = next(f for f in batch.fields if f.name == 'action')
    assert action.data[8:16] == (1).to_bytes(8, 'little')
    fields = decode_batch(replay_pb2.Batch.FromString(batch.SerializeToString()))
    assert torch.equal(fields['obs'][3], torch.arange(4, dtype=torch.float32) + 3)
    assert fields['done'].tolist() == [False, False, False, False, True]
    items = unstack(fields, 5)
    assert items[2]['action'].item() == 0 and items[1]['logit'].tolist() == [0.25, -1.5]


def test_a_batch_whose_bytes_do_not_match_its_metadata_is_refused():
    batch = encode_batch(transitions())
    batch.fields[0].data = batch.fields[0].data[:-4]
    with pytest.raises(EncodingError, match="field 'obs': 76 bytes, but 5 items of obs: float32\\[4\\] take 80"):
        decode_batch(batch)


@pytest.mark.parametrize(
    'mutate, message',
    [
        (lambda b: setattr(b.fields[0], 'dtype', 'object'), "dtype 'object' is not one of"),
        (lambda b: setattr(b.fields[0], 'name', '__import__("os")'), 'is not an identifier'),
        (lambda b: b.fields.append(b.fields[0]), "field 'obs' appears twice"),
        (lambda b: setattr(b, 'size', 0), 'batch size must be in'),
    ],
)
def test_malformed_metadata_is_refused_with_the_field_named(mutate, message):
    batch = encode_batch(transitions())
    mutate(batch)
    with pytest.raises(EncodingError, match=message.replace('(', '\\(').replace('[', '\\[')):
        batch_encoding(batch)


def test_decoding_checks_the_expected_encoding():
    expected = batch_encoding(encode_batch(transitions()))
    other = transitions()
    for item in other:
        item['obs'] = torch.zeros(3)
    with pytest.raises(EncodingError, match=r'obs: float32\[3\] \(expected obs: float32\[4\]\)'):
        decode_batch(encode_batch(other), expected)


def test_objects_that_are_not_tensors_or_numbers_cannot_travel():
    items = transitions()
    for item in items:
        item['note'] = 'text'
    with pytest.raises(EncodingError, match="field 'note': cannot encode a str"):
        encode_batch(items)
