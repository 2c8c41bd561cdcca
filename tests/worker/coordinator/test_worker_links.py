"""Worker entries of the coordinator config, in both layouts, and the errors for malformed ones."""

import pytest

from ding.worker.coordinator.worker_links import parse_worker_entries


def test_both_entry_layouts_give_host_and_port():
    entries = {'learner0': ['learner0', '127.0.0.1', 5000], 'learner1': {'host': '10.0.0.2', 'port': 5001}}
    assert parse_worker_entries('learner', entries) == {
        'learner0': ('127.0.0.1', 5000),
        'learner1': ('10.0.0.2', 5001),
    }
    assert parse_worker_entries('collector', None) == {}


@pytest.mark.parametrize(
    'entry, needle',
    [(['c0', '127.0.0.1'], 'must be [name, host, port]'), (['c0', '127.0.0.1', 'auto'], "fill 'auto' ports")],
)
def test_malformed_entries_are_refused(entry, needle):
    with pytest.raises(ValueError, match=needle.replace('[', r'\[').replace(']', r'\]')):
        parse_worker_entries('collector', {'c0': entry})
