import torch

from ding.rl_utils import value_inv_transform, value_transform


def test_inverse_undoes_the_transform_both_ways_over_a_wide_range():
    x = torch.cat([torch.linspace(-1e5, 1e5, 20001, dtype=torch.float64), torch.linspace(-2, 2, 401).double()])
    torch.testing.assert_close(value_inv_transform(value_transform(x)), x, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(value_transform(value_inv_transform(x)), x, rtol=1e-9, atol=1e-9)


def test_transform_by_hand_odd_and_increasing():
    # h(3) = (sqrt(4) - 1) + 0.01 * 3; h(0) = 0; h(-x) = -h(x)
    assert value_transform(torch.tensor(3.0)).item() == torch.tensor(1.03).item()
    assert value_transform(torch.tensor(0.0)).item() == 0.0
    x = torch.linspace(-100, 100, 1001)
    torch.testing.assert_close(value_transform(-x), -value_transform(x))
    assert bool((value_transform(x).diff() > 0).all())
    # large returns are squashed: h(10000) ~ sqrt(10000) + 100
    assert 190 < value_transform(torch.tensor(1e4)).item() < 200
