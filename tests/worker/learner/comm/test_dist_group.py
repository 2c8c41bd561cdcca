"""The ``dist`` field of a learner start task (a rank of a data-parallel group): read, or refused naming the field."""

import pytest

from ding.config.errors import ConfigError
from ding.worker.learner.comm.dist_group import DistSettings

GOOD = dict(rank=1, world_size=2, init_method='tcp://127.0.0.1:29500', backend='gloo', timeout=30)


def test_a_task_without_dist_trains_alone():
    assert DistSettings.of({'task_id': 't'}) is None


def test_dist_is_read():
    group = DistSettings.of({'dist': GOOD})
    assert group == DistSettings(1, 2, 'tcp://127.0.0.1:29500', 'gloo', 30.0)
    assert group.describe() == 'rank 1 of 2 (gloo, tcp://127.0.0.1:29500)'


@pytest.mark.parametrize(
    'change, field',
    [
        (dict(rank=-1), 'dist.rank'),
        (dict(rank=True), 'dist.rank'),
        (dict(world_size='2'), 'dist.world_size'),
        (dict(rank=2), 'dist.rank 2 is not below dist.world_size 2'),
        (dict(init_method='env://'), 'dist.init_method'),
        (dict(backend='mpi'), 'dist.backend'),
        (dict(timeout=0), 'dist.timeout'),
    ],
)
def test_a_bad_field_is_named(change, field):
    with pytest.raises(ConfigError, match=field):
        DistSettings.of({'dist': {**GOOD, **change}})
