"""``limit_openmp_threads``: OMP_NUM_THREADS from DING_TORCH_THREADS (default 1), a user's own value kept."""

import subprocess
import sys

import pytest

from tests.helpers.processes import child_env

PROBE = (
    'import os\n'
    'from ding.entry.startup import limit_openmp_threads\n'
    'limit_openmp_threads()\n'
    'print(os.environ["OMP_NUM_THREADS"])\n'
)


def _omp_threads_after_start_up(**env_vars: str) -> str:
    env = child_env()
    for name in ('OMP_NUM_THREADS', 'DING_TORCH_THREADS'):
        env.pop(name, None)
    env.update(env_vars)
    out = subprocess.run([sys.executable, '-c', PROBE], env=env, capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.strip()


@pytest.mark.parametrize(
    ('env_vars', 'expected'),
    [
        ({}, '1'),
        ({'DING_TORCH_THREADS': '3'}, '3'),
        ({'DING_TORCH_THREADS': 'many'}, '1'),
        ({'DING_TORCH_THREADS': '3', 'OMP_NUM_THREADS': '2'}, '2'),
    ],
)
def test_openmp_pool_size(env_vars, expected):
    assert _omp_threads_after_start_up(**env_vars) == expected
