"""``ding.torch_utils.Adam`` is torch's own Adam under DI-engine's name."""

import torch

from ding.torch_utils import Adam


def test_adam_is_torchs_adam():
    assert Adam is torch.optim.Adam
