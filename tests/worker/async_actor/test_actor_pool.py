"""Actor threads feeding the learner side: batches, policy lag, errors re-raised, nothing left running."""

import threading

import pytest
import torch

from ding.worker.async_actor import ActorError, ActorPool, AsyncActorSettings, LearnerFeed
from tests.helpers.async_toys import LinearActorPolicy, ScriptedVectorEnv


def _settings(**over):
    values = dict(
        actor_num=2,
        env_per_actor=4,
        unroll_len=5,
        trajectory_queue_size=4,
        staging_queue_size=1,
        updates_per_batch=1,
        double_buffer=True,
        drop_when_full=False,
        numpy_inference=True,
    )
    values.update(over)
    return AsyncActorSettings(**values)


def _pool(settings, envs=None, policy=None, **env_kwargs):
    made = [] if envs is None else envs

    def make_env(num_envs, seed):
        env = ScriptedVectorEnv([3 + i for i in range(num_envs)], **env_kwargs)
        made.append(env)
        return env

    return ActorPool(policy or LinearActorPolicy(), settings, make_env, seed=0), made


def _actor_threads():
    return [t for t in threading.enumerate() if t.name.startswith('ding-actor-')]


def test_actors_feed_batches_and_the_lag_is_measured_in_learner_versions():
    policy = LinearActorPolicy()
    pool, envs = _pool(_settings(), policy=policy)
    feed = LearnerFeed(pool)
    try:
        pool.start()
        pool.staging.publish(0, policy.actor_weights())
        versions = []
        for version in range(6):
            batch, lag = feed.next_batch(3, version)
            assert batch['obs'].shape == (6, 3 * 4, 2)  # unroll_len + 1, 3 unrolls of env_per_actor envs
            assert 0 <= lag.min <= lag.mean <= lag.max <= version
            versions.append(lag)
            pool.staging.publish(version + 1, policy.actor_weights())
        assert feed.envstep == 6 * 3 * 5 * 4 and feed.unrolls_taken == 18
    finally:
        assert pool.stop(timeout=20) == []
    assert all(env.closed for env in envs) and len(envs) == 4
    assert not _actor_threads()


def test_the_learner_may_reuse_the_newest_batch_while_nothing_new_waits():
    policy = LinearActorPolicy()
    pool, _ = _pool(_settings(actor_num=1, trajectory_queue_size=1), policy=policy, recv_delay=0.05)
    feed = LearnerFeed(pool, updates_per_batch=3)
    try:
        pool.start()
        pool.staging.publish(0, policy.actor_weights())
        first, _ = feed.next_batch(2, 0)
        again, lag = feed.next_batch(2, 1)  # the actors need ~0.5 s for the next unrolls
        assert again is first and lag.min == 1 and feed.reused_batches == 1
    finally:
        pool.stop(timeout=20)


def test_an_error_in_an_actor_stops_the_run_and_is_raised_in_the_learner_with_its_traceback():
    policy = LinearActorPolicy()
    pool, envs = _pool(_settings(), policy=policy, fail_at_step=7)
    feed = LearnerFeed(pool)
    try:
        pool.start()
        pool.staging.publish(0, policy.actor_weights())
        with pytest.raises(ActorError, match='scripted env failure') as info:
            for version in range(100):
                feed.next_batch(2, version)
        cause = info.value.__cause__
        assert isinstance(cause, RuntimeError)
        frames = []
        tb = cause.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        assert 'recv' in frames and 'run_cycle' in frames
    finally:
        pool.stop(timeout=20)
    assert all(env.closed for env in envs)
    assert not _actor_threads()


def test_stopping_wakes_actors_blocked_on_a_full_queue_and_on_the_first_weights():
    policy = LinearActorPolicy()
    blocked, _ = _pool(_settings(trajectory_queue_size=1), policy=policy)
    waiting, _ = _pool(_settings(actor_num=1))
    blocked.start()
    waiting.start()  # never gets weights
    blocked.staging.publish(0, policy.actor_weights())
    threading.Event().wait(0.3)
    assert blocked.trajectories.qsize() == 1
    assert blocked.stop(timeout=20) == [] and waiting.stop(timeout=20) == []
    assert not _actor_threads()


def test_drops_are_counted_when_configured():
    policy = LinearActorPolicy()
    pool, _ = _pool(_settings(actor_num=1, trajectory_queue_size=1, drop_when_full=True), policy=policy)
    try:
        pool.start()
        pool.staging.publish(0, policy.actor_weights())
        threading.Event().wait(0.5)
        assert pool.trajectories.dropped > 0
        assert pool.info()['dropped_trajectories'] == pool.trajectories.dropped
    finally:
        pool.stop(timeout=20)


@pytest.mark.parametrize(
    'numpy_policy, numpy_inference, engine', [(True, True, 'numpy'), (True, False, 'torch'), (False, True, 'torch')]
)
def test_actors_act_in_numpy_only_when_asked_and_the_policy_can(numpy_policy, numpy_inference, engine):
    policy = LinearActorPolicy(numpy=numpy_policy)
    pool, _ = _pool(_settings(numpy_inference=numpy_inference), policy=policy)
    try:
        assert pool.inference_engine() == engine
        pool.start()
        pool.staging.publish(0, policy.actor_weights())
        batch, _ = LearnerFeed(pool).next_batch(2, 0)
        torch.testing.assert_close(batch['logit'], policy.model(batch['obs'][:-1]).detach())
    finally:
        assert pool.stop(timeout=20) == []
