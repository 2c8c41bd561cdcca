"""Push refresh over a real server on 127.0.0.1: ``GET /weights/stream`` announces each published version and a
``WeightsFollower(subscribe=True)`` fetches on announcements only, counts the versions it skipped, and lives
through the server going away."""

import socket
import time

import pytest
import requests
import torch

from ding.service.http import ServiceServer
from ding.service.weights import WeightsClient, WeightsFollower, WeightsStore
from ding.utils.weights_signing import weights_signing_key
from ding.worker.collector.weights_stream import _interrupt, parse_sse_event
from tests.helpers.service import make_batch, make_dqn_policy, session
from tests.helpers.wait import wait_until

TOKEN = 'stream-test-token'
KEY = weights_signing_key('a-run-secret-of-enough-length-0123')


def model_weights(policy):
    return {'model': policy.learn_mode.get_attribute('model').state_dict()}


@pytest.fixture
def stream_server():
    store = WeightsStore(run_id='run-s', signing_key=KEY)
    server = ServiceServer(token=TOKEN, weights=store, max_subscribers=2, keepalive_seconds=0.5)
    server.start()
    try:
        yield server, store
    finally:
        server.close()


def subscribed_follower(server, policy):
    client = WeightsClient(server.address, token=TOKEN, signing_key=KEY)
    return WeightsFollower(client, policy.collect_mode, subscribe=True, keepalive_timeout=5, backoff=(0.1, 0.5))


def test_a_subscribed_follower_loads_each_new_version_without_polling(stream_server):
    server, store = stream_server
    learner, collector = make_dqn_policy(seed=1), make_dqn_policy(seed=2)
    follower = subscribed_follower(server, collector)
    try:
        assert wait_until(lambda: follower.subscription.connected, 5)
        for _ in range(20):  # nothing published: sync() asks the server nothing
            assert follower.sync() is False
        assert follower.client.fetches == 0
        for version in (1, 2, 3):
            learner.learn_mode.forward(make_batch(version))
            store.publish(model_weights(learner), version)
            assert follower.wait(5) is True
            assert follower.sync() is True and follower.version == version
            assert follower.sync() is False  # announced version already loaded: no request
        assert follower.client.fetches == 3 and follower.loads == 3
        assert follower.skipped_versions == 0 and follower.client.verify_failures == 0
        loaded = collector.collect_mode.state_dict()['model']
        assert all(torch.equal(loaded[k], v) for k, v in model_weights(learner)['model'].items())
    finally:
        follower.close()


def test_versions_published_faster_than_loaded_are_counted_as_skipped(stream_server):
    server, store = stream_server
    learner, collector = make_dqn_policy(seed=1), make_dqn_policy(seed=2)
    follower = subscribed_follower(server, collector)
    try:
        assert wait_until(lambda: follower.subscription.connected, 5)
        for version in range(1, 6):
            learner.learn_mode.forward(make_batch(version))
            store.publish(model_weights(learner), version)
        assert wait_until(lambda: (follower.subscription.latest or {}).get('version') == 5, 5)
        assert follower.sync() is True and follower.version == 5
        assert follower.skipped_versions == 4 and follower.stats()['skipped_versions'] == 4
    finally:
        follower.close()


def test_server_stop_ends_the_stream_and_the_follower_keeps_its_weights(stream_server):
    server, store = stream_server
    store.publish(model_weights(make_dqn_policy(seed=1)), 1)
    collector = make_dqn_policy(seed=2)
    follower = subscribed_follower(server, collector)
    assert follower.wait(5) and follower.sync() is True
    kept = {k: v.clone() for k, v in collector.collect_mode.state_dict()['model'].items()}
    t0 = time.monotonic()
    server.close()
    assert time.monotonic() - t0 < 3  # the open stream does not hold the server up
    assert wait_until(lambda: not follower.subscription.connected, 5)
    assert follower.subscription.alive  # reconnecting with backoff, not crashed
    assert follower.sync() is False and follower.version == 1
    now = collector.collect_mode.state_dict()['model']
    assert all(torch.equal(now[k], v) for k, v in kept.items())
    follower.close()
    assert not follower.subscription.alive


def test_the_stream_needs_the_token_and_bounds_its_subscribers(stream_server):
    server, store = stream_server
    http = session()
    assert http.get(server.url + '/weights/stream', timeout=5).status_code == 401
    assert (
        http.get(server.url + '/weights/stream', headers={'X-Ding-Token': 'wrong-token'}, timeout=5).status_code == 403
    )
    followers = [subscribed_follower(server, make_dqn_policy()) for _ in range(2)]
    try:
        assert wait_until(lambda: server.subscribers == 2, 5)
        full = http.get(server.url + '/weights/stream', headers={'X-Ding-Token': TOKEN}, timeout=5)
        assert full.status_code == 429 and full.json()['code'] == 602
        assert 'at most 2' in full.json()['message']
    finally:
        t0 = time.monotonic()
        for follower in followers:
            follower.close()
    assert time.monotonic() - t0 < 2  # closing interrupts the blocked read (no wait for a keep-alive)
    assert not any(follower.subscription.alive for follower in followers)
    assert wait_until(lambda: server.subscribers == 0, 5)  # closed streams free their places
    with pytest.raises(ValueError, match="run's token"):
        WeightsFollower(WeightsClient(server.address), make_dqn_policy().collect_mode, subscribe=True)


def test_server_sent_event_parsing():
    assert parse_sse_event(['event: weights', 'id: 3', 'data: {"version":3}']) == ('weights', '{"version":3}')
    assert parse_sse_event([': keep-alive']) is None
    assert parse_sse_event(['data: a', 'data: b']) == ('message', 'a\nb')


class EndedStream:
    """The raw stream of a response whose connection was closed meanwhile: its descriptor number is stale."""

    def __init__(self) -> None:
        sock = socket.socket()
        self.fd = sock.fileno()
        sock.close()
        self.closed = False

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        self.closed = True


def test_interrupting_a_stream_that_just_ended_does_not_raise():
    # A collector's task thread closed its follower as urllib3 released the ended stream: dup() of the stale
    # descriptor raised EBADF, the thread died, and its evaluation task never finished.
    response = requests.Response()
    response.raw = EndedStream()
    _interrupt(response)
    assert response.raw.closed
