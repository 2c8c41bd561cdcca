import os
import sys

import pytest

os.environ.setdefault('DING_QUIET', '1')
os.environ.setdefault('OMP_NUM_THREADS', '1')


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests share two cores; one intra-op thread keeps them from oversubscribing.

    Only when torch is already loaded: tests that never touch torch should not pay for importing it."""
    torch = sys.modules.get('torch')
    if torch is not None:
        torch.set_num_threads(1)
    yield
