import math

import pytest
import torch

from ding.rl_utils import RunningMeanStd, get_epsilon_greedy_fn, get_nstep_return_data


def test_exp_schedule():
    eps = get_epsilon_greedy_fn(0.95, 0.1, 10000, 'exp')
    assert eps(0) == pytest.approx(0.95)
    assert eps(10000) == pytest.approx(0.1 + 0.85 * math.exp(-1))
    assert eps(10**7) == pytest.approx(0.1)


def test_linear_schedule_is_clamped():
    eps = get_epsilon_greedy_fn(1.0, 0.2, 100, 'linear')
    assert [eps(0), eps(50), eps(100), eps(1000)] == pytest.approx([1.0, 0.6, 0.2, 0.2])


def test_bad_schedule_type():
    with pytest.raises(ValueError, match='linear'):
        get_epsilon_greedy_fn(1.0, 0.1, 10, 'cosine')


def _traj(rewards, last_done):
    return [
        {
            'obs': torch.tensor([float(i)]),
            'next_obs': torch.tensor([float(i + 1)]),
            'action': torch.tensor(0),
            'reward': torch.tensor(r),
            'done': last_done and i == len(rewards) - 1,
        }
        for i, r in enumerate(rewards)
    ]


def test_nstep_samples_on_a_terminated_trajectory():
    samples = get_nstep_return_data(_traj([1.0, 2.0, 3.0, 4.0], True), nstep=3, gamma=0.5)
    assert [s['reward'].tolist() for s in samples] == [[1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 0]]
    assert [s['next_obs'].item() for s in samples] == [3, 4, 4, 4]
    assert [s['done'] for s in samples] == [False, True, True, True]
    assert [s['value_gamma'].item() for s in samples] == [0.125, 0.125, 0.25, 0.5]


def test_nstep_samples_on_a_cut_trajectory_bootstrap_with_real_step_count():
    samples = get_nstep_return_data(_traj([1.0, 2.0, 3.0], False), nstep=2, gamma=0.9)
    assert [s['done'] for s in samples] == [False, False, False]
    assert [s['next_obs'].item() for s in samples] == [2, 3, 3]
    assert [s['value_gamma'].item() for s in samples] == pytest.approx([0.81, 0.81, 0.9])


def test_nstep_window_stops_at_a_termination_inside_the_list():
    traj = _traj([1.0, 1.0, 1.0], False)
    traj[0]['done'] = True  # an episode ended after the first step
    samples = get_nstep_return_data(traj, nstep=3, gamma=0.5)
    assert samples[0]['reward'].tolist() == [1, 0, 0]
    assert samples[0]['next_obs'].item() == 1 and samples[0]['done']


def test_running_mean_std_matches_numpy():
    import numpy as np

    rms = RunningMeanStd(epsilon=1e-8)
    data = np.random.RandomState(0).randn(100) * 3 + 1
    rms.update(data[:30])
    rms.update(data[30:])
    assert rms.mean == pytest.approx(data.mean(), rel=1e-5)
    assert rms.std == pytest.approx(data.std(), rel=1e-5)
