import numpy as np
import pytest

from ding.rl_utils.es import NoiseTable, centred_ranks, es_gradient


def ranks_by_counting(values):
    """Mean rank of each value: the number of smaller values plus half the number of other equal ones."""
    values = list(values)
    ranks = [sum(v < x for v in values) + (sum(v == x for v in values) - 1) / 2 for x in values]
    return np.array(ranks) / (len(values) - 1) - 0.5


@pytest.mark.parametrize(
    'returns',
    [
        [3.0, -1.0, 7.5, 0.0, 2.0],
        [200.0, 200.0, 9.0, 200.0, 12.0, 9.0],
        [5.0, 5.0],
        list(np.random.default_rng(0).normal(size=41)),
    ],
)
def test_centred_ranks_match_counting_and_span_minus_half_to_half(returns):
    shaped = centred_ranks(np.array(returns))
    np.testing.assert_allclose(shaped, ranks_by_counting(returns), atol=1e-6)
    assert shaped.dtype == np.float32
    assert shaped.sum() == pytest.approx(0.0, abs=1e-5)  # centred: a constant shift of all returns changes nothing


def test_a_single_return_shapes_to_zero():
    assert centred_ranks(np.array([4.0])).tolist() == [0.0]


def test_the_same_seed_and_size_give_the_same_table_and_slices_are_read_only_views():
    a, b = NoiseTable(3, 1000), NoiseTable(3, 1000)
    np.testing.assert_array_equal(a.noise, b.noise)
    assert not np.array_equal(a.noise, NoiseTable(4, 1000).noise)
    eps = a.get(990, 10)
    np.testing.assert_array_equal(eps, a.noise[990:])
    with pytest.raises(ValueError):
        eps[0] = 1.0
    assert a.noise.dtype == np.float32 and abs(float(a.noise.std()) - 1.0) < 0.1


def test_noise_ids_stay_inside_the_table():
    table = NoiseTable(0, 100)
    rng = np.random.default_rng(0)
    assert {table.sample_id(rng, 100) for _ in range(5)} == {0}
    assert max(table.sample_id(rng, 60) for _ in range(500)) == 40
    with pytest.raises(ValueError, match='noise_id 41 out of range'):
        table.get(41, 60)
    with pytest.raises(ValueError, match='does not fit'):
        table.get(0, 101)


def test_gradient_is_the_weighted_sum_of_noise_rows_over_episodes_times_sigma():
    table = NoiseTable(1, 5000)
    ids, weights = np.array([0, 17, 4000, 17]), np.array([0.5, -0.25, 0.1, 1.0])
    expected = sum(w * table.noise[i : i + 30].astype(np.float64) for i, w in zip(ids, weights)) / (8 * 0.02)
    np.testing.assert_allclose(es_gradient(table, ids, weights, 30, sigma=0.02, episodes=8), expected, rtol=1e-5)
