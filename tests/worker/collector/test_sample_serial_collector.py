"""SampleSerialCollector on a real BaseEnvManager of CounterEnvs driven by a real (tiny) policy."""

import glob
import os

import pytest

from ding.utils.registry import SERIAL_COLLECTOR_REGISTRY
from ding.worker.collector import SampleSerialCollector, create_serial_collector
from tests.helpers.serial_toys import TinyPolicy, make_manager


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # collectors write ./{exp_name}/log/
    return tmp_path


def make_collector(policy, env, **cfg):
    return create_serial_collector(dict(type='sample', **cfg), env=env, policy=policy.collect_mode, exp_name='exp')


def test_collects_n_sample_and_counts_envsteps(workdir):
    policy = TinyPolicy(dict(collect=dict(n_sample=16)))
    collector = make_collector(policy, make_manager(4, episode_len=5))
    try:
        assert SERIAL_COLLECTOR_REGISTRY.get_cls('sample') is SampleSerialCollector
        assert collector.traj_len == 4  # ceil(16 / 4 envs)
        data = collector.collect(train_iter=7)
        assert len(data) == 16 and collector.envstep == 16
        assert {d['env_id'] for d in data} == {0, 1, 2, 3}
        assert all(d['collect_iter'] == 7 for d in data)
        assert all(set(d) >= {'obs', 'next_obs', 'action', 'reward', 'done'} for d in data)
        # every trajectory handed to the policy was cut at traj_len (episodes are 5 steps long)
        assert all(len(t) == 4 for t in policy.train_sample_calls)
        data = collector.collect(n_sample=10, train_iter=8)
        assert len(data) == 10  # drop_extra trims the last step's surplus
        assert collector.envstep >= 26
        more = collector.collect(n_sample=10, train_iter=9, drop_extra=False)
        assert len(more) >= 10
    finally:
        collector.close()


def test_policy_kwargs_reach_the_policy(workdir):
    policy = TinyPolicy()
    collector = make_collector(policy, make_manager(2))
    try:
        collector.collect(n_sample=6, policy_kwargs={'eps': 1.0})
        assert policy.collect_kwargs_seen and all(k == {'eps': 1.0} for k in policy.collect_kwargs_seen)
        policy.collect_kwargs_seen.clear()
        collector.collect(n_sample=6)
        assert all(k == {'eps': 0.0} for k in policy.collect_kwargs_seen)
    finally:
        collector.close()


def test_abnormal_episode_is_dropped(workdir):
    # whole episodes only (traj_len_inf), env 0 crashes once at step 2 of its first episode
    policy = TinyPolicy(dict(traj_len_inf=True))
    collector = make_collector(policy, make_manager(2, episode_len=5, crash_env=0, crash_at=2))
    try:
        data = collector.collect(n_sample=20)
        assert len(data) == 20
        # each trajectory given to get_train_sample is a complete episode: steps 0..4, done only at the end
        assert policy.train_sample_calls
        for traj in policy.train_sample_calls:
            assert [int(t['obs'][0]) for t in traj] == [0, 1, 2, 3, 4]
            assert [t['done'] for t in traj] == [False] * 4 + [True]
            assert len({t['env_id'] for t in traj}) == 1
        # env 0's first two (pre-crash) transitions never made it out
        env0 = [d for d in data if d['env_id'] == 0]
        assert len(env0) % 5 == 0
        assert [0] in policy.reset_calls  # the policy state of the crashed env was reset
    finally:
        collector.close()


def _on_policy_setup(on_policy):
    # env 3 has 2-step episodes, the others 5: when n_sample is reached envs 0-2 hold one unfinished step
    policy = TinyPolicy(dict(on_policy=on_policy, collect=dict(n_sample=12)))
    return policy, make_collector(policy, make_manager(4, lens=[5, 5, 5, 2]))


def test_on_policy_cuts_unfinished_trajectories_at_the_end(workdir):
    policy, collector = _on_policy_setup(True)
    try:
        assert collector.traj_len == 3
        data = collector.collect(train_iter=0, drop_extra=False)
        assert len(data) == 16
        # the last three trajectories are the cut ones: one step each, done=False so the policy bootstraps
        cut = policy.train_sample_calls[-3:]
        assert all(len(t) == 1 and t[-1]['done'] is False for t in cut)
        assert sorted(t[0]['env_id'] for t in cut) == [0, 1, 2]
        # nothing is carried over: the next rollout holds only transitions of the newer policy
        data = collector.collect(train_iter=1, drop_extra=False)
        assert all(d['collect_iter'] == 1 for d in data)
    finally:
        collector.close()


def test_off_policy_keeps_unfinished_trajectories_for_the_next_call(workdir):
    policy, collector = _on_policy_setup(False)
    try:
        data = collector.collect(train_iter=0, drop_extra=False)
        assert len(data) == 13
        data = collector.collect(train_iter=1, drop_extra=False)
        assert {d['collect_iter'] for d in data} == {0, 1}
    finally:
        collector.close()


def test_reset_zeroes_counters_and_accepts_new_policy(workdir):
    policy = TinyPolicy()
    collector = make_collector(policy, make_manager(2))
    try:
        collector.collect(n_sample=4)
        assert collector.envstep > 0
        other = TinyPolicy(dict(collect=dict(n_sample=6)))
        collector.reset(_policy=other)  # a full Policy is narrowed to its collect_mode
        assert collector.envstep == 0
        assert len(collector.collect()) == 6
        assert other.collect_kwargs_seen and collector.traj_len == 3
    finally:
        collector.close()
    collector.close()  # closing twice is fine


def test_logs_summary_every_collect_print_freq_iterations(workdir):
    policy = TinyPolicy()
    collector = make_collector(policy, make_manager(2, episode_len=3), collect_print_freq=5)
    try:
        collector.collect(n_sample=12, train_iter=0)
        collector.collect(n_sample=12, train_iter=4)  # not yet
        log_file = workdir / 'exp' / 'log' / 'collector' / 'collector_logger.txt'
        assert 'reward_mean' not in log_file.read_text()
        collector.collect(n_sample=12, train_iter=5)
        text = log_file.read_text()
        assert 'reward_mean' in text and 'avg_envstep_per_sec' in text and 'episode_count' in text
    finally:
        collector.close()
    assert glob.glob(os.path.join(str(workdir), 'exp', 'log', 'collector', 'collector', 'events.*'))


def test_collect_without_n_sample_is_an_error(workdir):
    policy = TinyPolicy(dict(collect=dict(n_sample=None)))
    collector = make_collector(policy, make_manager(1))
    try:
        with pytest.raises(RuntimeError, match='n_sample'):
            collector.collect()
    finally:
        collector.close()
