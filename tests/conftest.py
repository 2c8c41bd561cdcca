import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault('DING_QUIET', '1')


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests share two cores; one intra-op thread keeps them from oversubscribing."""
    import torch
    torch.set_num_threads(1)
    yield
