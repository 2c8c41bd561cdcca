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


def _trajectory(length, done_at_end, obs_dim=2):
    return [
        {
            'obs': torch.full((obs_dim,), float(i)),
            'next_obs': torch.full((obs_dim,), float(i + 1)),
            'action': torch.tensor(i % 2),
            'reward': torch.tensor(float(i + 1)),
            'done': done_at_end and i == length - 1,
            'prev_state': (torch.full((3,), float(i)), torch.full((3,), -float(i))),
            'collect_iter': 7,
            'env_id': 1,
        }
        for i in range(length)
    ]


def test_sequence_samples_cover_each_step_once_with_burn_in_and_bootstrap_tail():
    from ding.rl_utils import get_sequence_train_sample

    gamma = 0.5
    samples = get_sequence_train_sample(_trajectory(7, done_at_end=True), 2, 3, 2, gamma)
    assert len(samples) == 3  # steps 0-2, 3-5, 6 (+ padding)
    first, second, last = samples
    # obs positions -2 .. 4: two left-padding zeros, then obs 0..4
    assert first['obs'][:, 0].tolist() == [0, 0, 0, 1, 2, 3, 4]
    assert first['burnin_mask'].tolist() == [False, False]
    assert first['prev_state'][0][0].item() == 0.0  # the state before the first real step
    # the second sequence burns in on steps 1, 2 and starts from the state stored with step 1
    assert second['obs'][:, 0].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert second['burnin_mask'].tolist() == [True, True]
    assert second['prev_state'][0][0].item() == 1.0 and second['prev_state'][1][0].item() == -1.0
    assert second['action'].tolist() == [1, 0, 1]
    # step 3: rewards 4, 5 (2 steps); step 5: rewards 6, 7 ending in the termination at step 6
    assert second['reward'].tolist() == [[4, 5], [5, 6], [6, 7]]
    assert second['done'].tolist() == [False, False, True]
    assert second['bootstrap_step'].tolist() == [2, 2, 2]
    assert second['value_gamma'].tolist() == [gamma**2] * 3
    # the last sequence: one real step (a 1-step window ending the episode), then padding
    assert last['mask'].tolist() == [True, False, False]
    assert last['reward'][0].tolist() == [7, 0] and last['done'][0].item() and last['bootstrap_step'][0] == 1
    assert last['obs'][:, 0].tolist() == [4, 5, 6, 7, 0, 0, 0]  # obs 6, then the final next_obs 7, then zeros
    assert (last['collect_iter'], last['env_id']) == (7, 1)


def test_sequence_samples_of_a_cut_segment_bootstrap_from_its_last_next_obs():
    from ding.rl_utils import get_sequence_train_sample

    (sample,) = get_sequence_train_sample(_trajectory(3, done_at_end=False), 0, 3, 3, 0.9)
    assert sample['bootstrap_step'].tolist() == [3, 2, 1]  # shortened by the segment's end, not by a termination
    assert sample['done'].tolist() == [False, False, False]
    assert sample['value_gamma'].tolist() == pytest.approx([0.9**3, 0.9**2, 0.9])
    assert sample['obs'][:, 0].tolist() == [0, 1, 2, 3, 0, 0]  # each bootstrap position t + k reads obs 3


def test_sequence_samples_refuse_bad_lengths():
    from ding.rl_utils import get_sequence_train_sample

    with pytest.raises(ValueError, match='learn_unroll_len'):
        get_sequence_train_sample(_trajectory(3, True), 2, 0, 1, 0.9)
