import hashlib
import subprocess
import sys

import pytest

from ding.rl_utils.es import NoiseTable
from ding.worker.es.noise import MAX_NOISE_TABLE_SIZE, noise_table_from_spec, shared_noise_table
from tests.helpers.processes import child_env

DIGEST_SCRIPT = (
    'import hashlib, sys; from ding.worker.es.noise import shared_noise_table; '
    'print(hashlib.sha256(shared_noise_table(int(sys.argv[1]), int(sys.argv[2])).noise.tobytes()).hexdigest())'
)


def test_another_process_builds_the_same_table_from_seed_and_size():
    local = shared_noise_table(7, 100_000)
    other = subprocess.run(
        [sys.executable, '-c', DIGEST_SCRIPT, '7', '100000'], capture_output=True, text=True, timeout=120,
        env=child_env(), check=True,
    )  # fmt: skip
    assert other.stdout.strip() == hashlib.sha256(local.noise.tobytes()).hexdigest()


def test_one_table_per_seed_and_size_in_a_process():
    table = noise_table_from_spec({'seed': 3, 'size': 5000})
    assert noise_table_from_spec({'seed': 3, 'size': 5000}) is table
    assert noise_table_from_spec({'seed': 4, 'size': 5000}) is not table
    assert (table.noise == NoiseTable(3, 5000).noise).all()


@pytest.mark.parametrize(
    'spec, message',
    [
        ([3, 5000], 'expected a dict'),
        ({'seed': 3}, r"missing keys \['size'\]"),
        ({'seed': 3, 'size': 10, 'path': '/tmp/x'}, r"unknown keys \['path'\]"),
        ({'seed': -1, 'size': 10}, 'noise.seed'),
        ({'seed': True, 'size': 10}, 'noise.seed'),
        ({'seed': 0, 'size': MAX_NOISE_TABLE_SIZE + 1}, 'noise.size'),
        ({'seed': 0, 'size': 10.0}, 'noise.size'),
    ],
)
def test_a_bad_spec_is_refused_before_anything_is_allocated(spec, message):
    with pytest.raises(ValueError, match=message):
        noise_table_from_spec(spec, where='noise')
