import pytest
import torch

from ding.rl_utils.scan import reverse_scan


def by_hand(delta, factor):
    out, acc = torch.empty_like(delta), torch.zeros_like(delta[0])
    for t in reversed(range(delta.shape[0])):
        acc = delta[t] + factor[t] * acc
        out[t] = acc
    return out


@pytest.mark.parametrize('shape', [(7,), (5, 3), (4, 2, 3), (1, 4)])
def test_the_scan_follows_the_recursion(shape):
    torch.manual_seed(0)
    delta, factor = torch.randn(shape, dtype=torch.float64), torch.rand(shape, dtype=torch.float64)
    torch.testing.assert_close(reverse_scan(delta, factor), by_hand(delta, factor))


def test_a_zero_factor_cuts_the_recursion_and_inputs_stay_untouched():
    delta, factor = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.5, 0.0, 0.5])
    before = delta.clone()
    assert reverse_scan(delta, factor).tolist() == [2.0, 2.0, 3.0]
    assert torch.equal(delta, before)


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match='shape'):
        reverse_scan(torch.zeros(3, 2), torch.zeros(3))
