"""Signed weights over a real server on 127.0.0.1: a good version loads; a tampered body, a wrong signature,
a missing key or a replayed older version is refused and the collector keeps its last good weights."""

import pytest
import torch

from ding.service.http import ServiceServer
from ding.service.weights import WeightsClient, WeightsFollower, WeightsStore, serialize_weights, sha256_hex
from ding.utils.weights_signing import sign_weights, signature_matches, weights_signing_key
from tests.helpers.service import make_batch, make_dqn_policy, session
from tests.helpers.weights_proxy import WeightsProxy

RUN_SECRET = 'a-run-secret-of-enough-length-0123'
KEY = weights_signing_key(RUN_SECRET)


def model_weights(policy):
    return {'model': policy.learn_mode.get_attribute('model').state_dict()}


def model_state(policy):
    return {k: v.clone() for k, v in policy.collect_mode.state_dict()['model'].items()}


def same_state(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def signed_server():
    store = WeightsStore(run_id='run-a', signing_key=KEY)
    server = ServiceServer(token='weights-test-token', weights=store)
    server.start()
    try:
        yield server, store
    finally:
        server.close()


def test_signature_binds_run_version_and_sha():
    sha = 'ab' * 32
    signature = sign_weights(KEY, 'run-a', 3, sha)
    assert signature_matches(KEY, 'run-a', 3, sha, signature)
    assert not signature_matches(KEY, 'run-b', 3, sha, signature)
    assert not signature_matches(KEY, 'run-a', 4, sha, signature)
    assert not signature_matches(KEY, 'run-a', 3, 'cd' * 32, signature)
    assert not signature_matches(weights_signing_key(RUN_SECRET + 'x'), 'run-a', 3, sha, signature)
    assert not signature_matches(KEY, 'run-a', 3, sha, None) and not signature_matches(KEY, 'run-a', 3, sha, 'é')
    assert KEY != RUN_SECRET.encode() and len(KEY) == 32  # derived, never the secret itself


def test_a_signed_version_loads_and_its_meta_carries_the_signature(signed_server):
    server, store = signed_server
    policy = make_dqn_policy(seed=1)
    published = store.publish(model_weights(policy), version=4)
    raw = session().get(server.url + '/weights/current')
    assert raw.headers['X-Weights-Run-Id'] == 'run-a'
    assert raw.headers['X-Weights-Signature'] == sign_weights(KEY, 'run-a', 4, published.sha256)
    with WeightsClient(server.address, signing_key=KEY) as client:
        meta = client.meta()
        assert meta['signed'] is True and meta['run_id'] == 'run-a' and meta['signature_scheme'] == 'hmac-sha256'
        assert meta['signature'] == raw.headers['X-Weights-Signature']
        collector = make_dqn_policy(seed=2)
        follower = WeightsFollower(client, collector.collect_mode)
        assert follower.sync() is True and follower.version == 4 and follower.run_id == 'run-a'
        assert same_state(model_state(collector), model_weights(policy)['model'])
        assert client.verify_failures == 0


def forge_body_and_sha(path, answer):
    """An attacker that replaces the weights and fixes up the sha256 headers, but cannot sign."""
    status, headers, body = answer
    if path != '/weights/current' or status != 200:
        return answer
    forged = serialize_weights({'model': {'w': torch.ones(2)}}, int(headers['X-Weights-Version']))
    sha = sha256_hex(forged)
    return status, dict(headers, **{'X-Weights-SHA256': sha, 'ETag': f'"{sha}"'}), forged


def wrong_signature(path, answer):
    status, headers, body = answer
    if 'X-Weights-Signature' in headers:
        headers = dict(headers, **{'X-Weights-Signature': '0' * 64})
    return status, headers, body


def unsigned(path, answer):
    status, headers, body = answer
    return status, {k: v for k, v in headers.items() if k != 'X-Weights-Signature'}, body


@pytest.mark.parametrize(
    'rewrite, reason',
    [(forge_body_and_sha, 'signature'), (wrong_signature, 'signature'), (unsigned, 'not signed')],
    ids=['tampered-body', 'wrong-signature', 'signature-stripped'],
)
def test_tampered_weights_are_refused_before_parsing_and_the_last_good_ones_stay(signed_server, rewrite, reason):
    server, store = signed_server
    learner = make_dqn_policy(seed=1)
    store.publish(model_weights(learner), version=1)
    collector = make_dqn_policy(seed=2)
    direct = WeightsFollower(WeightsClient(server.address, signing_key=KEY), collector.collect_mode)
    assert direct.sync() is True
    good = model_state(collector)

    learner.learn_mode.forward(make_batch(5))
    store.publish(model_weights(learner), version=2)
    with WeightsProxy(server.url, rewrite) as proxy:
        client = WeightsClient(proxy.address, signing_key=KEY)
        through = WeightsFollower(client, collector.collect_mode)
        through.version, through.sha256, through.run_id = direct.version, direct.sha256, direct.run_id
        assert through.sync() is False
        assert reason in through.last_error and 'refused' in through.last_error
        assert client.verify_failures == 1 and through.version == 1
        assert same_state(model_state(collector), good)
        client.close()
    direct.client.close()


def test_a_replayed_older_version_is_refused(signed_server):
    server, store = signed_server
    learner = make_dqn_policy(seed=1)
    store.publish(model_weights(learner), version=1)
    recorded = session().get(server.url + '/weights/current')  # an attacker records version 1, validly signed
    assert recorded.status_code == 200
    learner.learn_mode.forward(make_batch(7))
    store.publish(model_weights(learner), version=2)

    def replay_version_1(path, answer):
        kept = {k: recorded.headers[k] for k in answer[1] if k in recorded.headers}
        return 200, kept, recorded.content

    collector = make_dqn_policy(seed=2)
    client = WeightsClient(server.address, signing_key=KEY, run_id='run-a')
    follower = WeightsFollower(client, collector.collect_mode)
    assert follower.sync() is True and follower.version == 2
    newest = model_state(collector)
    with WeightsProxy(server.url, replay_version_1) as proxy:
        replayed = WeightsClient(proxy.address, signing_key=KEY)
        follower.client = replayed
        assert follower.sync() is False and 'not newer than the loaded 2' in follower.last_error
        assert replayed.verify_failures == 1 and follower.version == 2
        assert same_state(model_state(collector), newest)
        replayed.close()
    other_run = WeightsClient(server.address, signing_key=KEY, run_id='run-b')
    assert other_run.fetch() is None and "expected 'run-b'" in other_run.last_error
    other_run.close()
    client.close()


def test_keys_and_unsigned_weights(signed_server):
    server, store = signed_server
    store.publish({'model': {'w': torch.zeros(2)}}, version=3)
    with WeightsClient(server.address) as keyless:
        assert keyless.fetch() is None and 'no signing key' in keyless.last_error
        assert keyless.verify_failures == 1
    with WeightsClient(server.address, accept_unsigned=True) as accepting:
        assert accepting.fetch()[1] == 3  # explicitly told: sha256 only
    with WeightsClient(server.address, signing_key=weights_signing_key('another-secret-0123456789')) as wrong:
        assert wrong.fetch() is None and 'does not match' in wrong.last_error
    unsigned_store = WeightsStore(run_id='run-u')
    unsigned_store.publish({'model': {'w': torch.zeros(2)}}, version=1)
    plain = ServiceServer(weights=unsigned_store)
    plain.start()
    try:
        with WeightsClient(plain.address, signing_key=KEY) as verifying:
            assert verifying.fetch() is None and 'not signed' in verifying.last_error
        with WeightsClient(plain.address) as keyless:
            assert keyless.fetch() is None and 'unsigned weights and no signing key' in keyless.last_error
        assert WeightsClient(plain.address).meta()['signed'] is False
    finally:
        plain.close()
