import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
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
