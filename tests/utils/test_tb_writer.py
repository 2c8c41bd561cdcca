"""The lean tensorboard writer: its files are valid TFRecords of tensorboard Events (checked with tensorboardX's
own protobuf classes and CRC), ``flush()`` puts them on disk, and non-scalar calls reach tensorboardX."""

import glob
import os
import struct

import numpy as np
import pytest
import torch

from ding.utils.log_helper import summary_writer_cls
from ding.utils.tb_writer import SummaryWriter, crc32c


def read_records(path):
    """Every record of a TFRecord file, both CRCs checked with tensorboardX's implementation."""
    from tensorboardX.crc32c import crc32c as reference_crc

    def masked(data):
        crc = reference_crc(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    with open(path, 'rb') as f:
        data = f.read()
    records, pos = [], 0
    while pos < len(data):
        header = data[pos : pos + 8]
        (length,) = struct.unpack('<Q', header)
        assert struct.unpack('<I', data[pos + 8 : pos + 12])[0] == masked(header)
        payload = data[pos + 12 : pos + 12 + length]
        assert struct.unpack('<I', data[pos + 12 + length : pos + 16 + length])[0] == masked(payload)
        records.append(payload)
        pos += 16 + length
    return records


def parse_events(path):
    from tensorboardX.proto import event_pb2

    return [event_pb2.Event.FromString(r) for r in read_records(path)]


def test_components_get_the_lean_writer():
    assert summary_writer_cls() is SummaryWriter


def test_crc32c_matches_the_reference_values():
    assert crc32c(b'') == 0
    assert crc32c(b'123456789') == 0xE3069283  # the standard CRC-32C check value


def test_scalars_are_readable_tensorboard_events_after_flush(tmp_path):
    writer = SummaryWriter(str(tmp_path / 'tb'))
    writer.add_scalar('learner/loss', 0.25, 0)
    writer.add_scalar('learner/loss', torch.tensor(0.125), 7)
    writer.add_scalar('eval/return', np.float64(195.5), 300, walltime=1234.5)
    writer.add_scalar('eval/negative_step', 1.0, -3)
    writer.flush()  # on disk now, before close
    (path,) = glob.glob(str(tmp_path / 'tb' / 'events.out.tfevents.*'))
    events = parse_events(path)
    assert events[0].file_version == 'brain.Event:2'
    got = [(e.summary.value[0].tag, e.step, e.summary.value[0].simple_value) for e in events[1:]]
    assert got == [
        ('learner/loss', 0, 0.25),
        ('learner/loss', 7, 0.125),
        ('eval/return', 300, 195.5),
        ('eval/negative_step', -3, 1.0),
    ]
    assert events[3].wall_time == 1234.5
    writer.close()
    with pytest.raises(ValueError, match='closed'):
        writer.add_scalar('late', 1.0, 1)


def test_histograms_and_scalar_groups_go_to_a_tensorboardx_writer_in_the_same_directory(tmp_path):
    logdir = str(tmp_path / 'tb')
    with SummaryWriter(logdir) as writer:
        writer.add_scalar('a', 1.0, 1)
        writer.add_histogram('weights', np.arange(10, dtype=np.float64), 1)
        writer.add_scalars('group', {'x': 1.0, 'y': 2.0}, 1)
    kinds = {}
    for path in glob.glob(os.path.join(logdir, '**', 'events.out.tfevents.*'), recursive=True):
        for event in parse_events(path):
            for value in event.summary.value:
                kinds[value.tag] = value.WhichOneof('value')
    assert kinds['a'] == 'simple_value'
    assert kinds['weights'] == 'histo'
    assert kinds['group'] == 'simple_value'  # tensorboardX writes each group member under its own sub-directory
