"""A parallel collector's weights over HTTP with the run secret: signatures checked, and with
``weights_refresh='subscribe'`` the learner's stream followed (opened with the token derived from the secret)."""

import logging

import pytest

from ding.config import ConfigError
from ding.config.validate import validate_config
from ding.service.http import ServiceServer
from ding.service.weights import WeightsStore
from ding.utils.weights_signing import weights_signing_key, weights_stream_token
from ding.worker.collector.policy_updater import PolicyUpdater
from tests.helpers.service import make_batch, make_dqn_policy
from tests.helpers.wait import wait_until

SECRET = 'a-run-secret-of-enough-length-0123'


def model_weights(policy):
    return {'model': policy.learn_mode.get_attribute('model').state_dict()}


@pytest.fixture
def learner_service():
    store = WeightsStore(run_id='run-p', signing_key=weights_signing_key(SECRET))
    # The control token stays the learner's; collectors open the stream with the token derived from the secret.
    server = ServiceServer(
        token='control-token-0123', weights=store, stream_token=weights_stream_token(SECRET), keepalive_seconds=0.5
    )
    server.start()
    try:
        yield server, store
    finally:
        server.close()


def no_policy_file(path):
    raise AssertionError('an http collector never reads the policy file')


def updater(server, refresh):
    return PolicyUpdater('http', 3.0, None, server.address, logging.getLogger('test'), '[test]', refresh=refresh)


def test_a_subscribed_collector_loads_each_announced_version_and_counts_skips(learner_service):
    server, store = learner_service
    learner, collector = make_dqn_policy(seed=1), make_dqn_policy(seed=2)
    weights = updater(server, 'subscribe')
    weights.use_run_secret(SECRET)
    try:
        assert weights.update(collector.collect_mode, 0, no_policy_file) is None  # nothing published yet
        follower = weights.follower
        assert follower is not None and wait_until(lambda: follower.subscription.connected, 5)
        store.publish(model_weights(learner), 1)
        assert follower.wait(5)
        assert (
            weights.update(collector.collect_mode, 0, no_policy_file) == 1
        )  # no update_policy_second wait when subscribed
        for version in (2, 3, 4):
            learner.learn_mode.forward(make_batch(version))
            store.publish(model_weights(learner), version)
        assert wait_until(lambda: follower.subscription.latest['version'] == 4, 5)
        assert weights.update(collector.collect_mode, 1, no_policy_file) == 4
        assert follower.stats()['skipped_versions'] == 2 and follower.client.verify_failures == 0
        # The first update polled (the stream was not up yet); then one fetch per loaded version.
        assert follower.client.fetches == 3
    finally:
        weights.close()
    assert not follower.subscription.alive


def test_without_the_run_secret_the_stream_is_closed_to_a_collector(learner_service, caplog):
    server, store = learner_service
    store.publish(model_weights(make_dqn_policy(seed=1)), 1)
    weights = updater(server, 'subscribe')
    try:
        with caplog.at_level(logging.WARNING):
            assert weights.update(make_dqn_policy(seed=2).collect_mode, 0, no_policy_file) == 1  # polled, sha256 only
        assert 'needs the run secret for /weights/stream; polling instead' in caplog.text
        assert weights.follower.subscription is None
    finally:
        weights.close()


def test_a_collector_with_another_secret_refuses_the_weights(learner_service):
    server, store = learner_service
    store.publish(model_weights(make_dqn_policy(seed=1)), 1)
    weights = updater(server, 'poll')
    weights.use_run_secret('another-secret-of-enough-length')
    try:
        assert weights.update(make_dqn_policy(seed=2).collect_mode, 0, no_policy_file) is None
        assert weights.follower.client.verify_failures == 1
    finally:
        weights.close()


def test_weights_refresh_takes_poll_or_subscribe():
    cfg = {'policy': {'collect': {'collector': {'weights_refresh': 'push'}}}}
    with pytest.raises(ConfigError, match=r"policy.collect.collector.weights_refresh = .*'push'.* is not one of"):
        validate_config(cfg, cfg)
    with pytest.raises(ValueError, match='weights_refresh must be one of'):
        PolicyUpdater('http', 3.0, None, None, logging.getLogger('test'), '[test]', refresh='push')
