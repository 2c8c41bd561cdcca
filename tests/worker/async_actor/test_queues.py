"""The trajectory queue (back-pressure, counted drops) and the staging queue (newest weights, never blocking
an actor that holds a copy), used from real threads."""

import threading

import pytest

from ding.worker.async_actor import QueueClosed, StagingQueue, TrajectoryQueue
from tests.helpers.wait import wait_until


def _start(fn):
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_a_full_trajectory_queue_makes_the_actor_wait_until_the_learner_takes_one():
    q = TrajectoryQueue(2)
    assert q.put('a') and q.put('b')
    done = threading.Event()
    actor = _start(lambda: (q.put('c'), done.set()))
    try:
        assert not done.wait(0.3)  # back-pressure: the third put waits
        assert q.get() == 'a'
        assert done.wait(10)
        assert [q.get(), q.get()] == ['b', 'c']
        assert q.dropped == 0 and q.put_wait_seconds > 0.2
    finally:
        q.close()
        actor.join(10)


def test_a_dropping_queue_refuses_and_counts_instead_of_waiting():
    q = TrajectoryQueue(1, drop_when_full=True)
    assert q.put(1)
    assert q.put(2) is False and q.put(3) is False
    assert q.dropped == 2 and q.get() == 1 and q.get(timeout=0.01) is None


def test_closing_wakes_a_waiting_actor_and_a_waiting_learner():
    q = TrajectoryQueue(1)
    q.put('x')
    errors = []

    def wait_to_put():
        try:
            q.put('y')
        except QueueClosed as exc:
            errors.append(exc)

    actor = _start(wait_to_put)
    wait_until(lambda: actor.is_alive(), what='the actor to wait')
    q.close()
    actor.join(10)
    assert not actor.is_alive() and len(errors) == 1
    assert q.drain() == ['x']
    with pytest.raises(QueueClosed):
        q.get(timeout=1)


def test_staging_keeps_the_newest_copy_and_counts_the_ones_no_actor_took():
    staging = StagingQueue(1)
    staging.publish(1, 'w1')
    staging.publish(2, 'w2')  # w1 was never taken
    assert staging.replaced == 1
    assert staging.newest(None) == (2, 'w2')
    staging.publish(3, 'w3')  # w2 was taken: not counted as replaced
    assert staging.replaced == 1
    assert staging.newest(2) == (3, 'w3')


def test_an_actor_holding_weights_never_waits_for_new_ones():
    staging = StagingQueue(2)
    staging.publish(5, 'w5')
    assert staging.newest(5) is None  # at once: nothing newer
    assert staging.newest(4) == (5, 'w5')
    assert staging.latest_version() == 5


def test_only_an_actor_without_weights_waits_for_the_first_copy():
    staging = StagingQueue(1)
    got = []
    actor = _start(lambda: got.append(staging.newest(None, timeout=30)))
    try:
        assert not wait_for(got, 0.2)
        staging.publish(0, 'w0')
        actor.join(10)
        assert got == [(0, 'w0')]
        assert staging.newest(None, timeout=0.01) == (0, 'w0')
    finally:
        staging.close()
        actor.join(10)


def test_staging_size_is_one_or_two():
    with pytest.raises(ValueError, match='1 or 2'):
        StagingQueue(3)


def wait_for(items, seconds):
    threading.Event().wait(seconds)
    return bool(items)
