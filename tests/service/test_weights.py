"""Policy weights over HTTP: publish, fetch, 304, integrity checks and a collector keeping its last good weights."""

import pytest
import torch

from ding.service.http import serve
from ding.service.weights import (
    WeightsClient,
    WeightsError,
    WeightsFollower,
    WeightsStore,
    check_policy_transport,
    deserialize_weights,
    etag_matches,
    serialize_weights,
)
from tests.helpers.service import make_batch, make_dqn_policy, session
from tests.helpers.weights_proxy import WeightsProxy


def model_weights(policy):
    return {'model': policy.learn_mode.get_attribute('model').state_dict()}


@pytest.fixture
def weights_server():
    store = WeightsStore()
    server = serve(weights=store)
    try:
        yield server, store
    finally:
        server.close()


def flip_a_body_byte(path, answer):
    """A corrupting hop: one byte of every body flipped, the headers kept."""
    status, headers, body = answer
    body = bytearray(body)
    if body:
        body[len(body) // 2] ^= 0xFF
    return status, headers, bytes(body)


def test_fetch_meta_and_not_modified(weights_server):
    server, store = weights_server
    client = WeightsClient(server.address, accept_unsigned=True)
    try:
        assert client.fetch() is None and client.last_status == 'error' and '503' in client.last_error
        policy = make_dqn_policy()
        published = store.publish(model_weights(policy), version=7)
        meta = client.meta()
        assert meta['version'] == 7 and meta['sha256'] == published.sha256 and meta['size'] == published.size
        assert isinstance(meta['time'], float)

        state_dict, version, sha = client.fetch()
        assert version == 7 and sha == published.sha256 and client.last_status == 'ok'
        for key, tensor in model_weights(policy)['model'].items():
            assert torch.equal(state_dict['model'][key], tensor)

        raw = session().get(server.url + '/weights/current')
        assert raw.headers['X-Weights-Version'] == '7' and raw.headers['X-Weights-SHA256'] == published.sha256
        assert raw.headers['ETag'] == f'"{published.sha256}"'
        same = session().get(server.url + '/weights/current', headers={'If-None-Match': f'"{published.sha256}"'})
        assert same.status_code == 304 and same.content == b'' and same.headers['ETag'] == published.etag
        assert client.fetch(if_none_match=sha) is None and client.last_status == 'not_modified'

        policy.learn_mode.forward(make_batch(0))  # the weights change
        newer = store.publish(model_weights(policy), version=8)
        assert newer.sha256 != sha
        got = client.fetch(if_none_match=sha)
        assert got is not None and got[1] == 8 and got[2] == newer.sha256
    finally:
        client.close()


def test_corrupted_payload_is_refused_and_the_last_good_weights_are_kept(weights_server):
    server, store = weights_server
    learner_policy = make_dqn_policy(seed=1)
    collector_policy = make_dqn_policy(seed=2)
    store.publish(model_weights(learner_policy), version=1)

    follower = WeightsFollower(WeightsClient(server.address, accept_unsigned=True), collector_policy.collect_mode)
    assert follower.sync() is True and follower.version == 1
    good = {k: v.clone() for k, v in collector_policy.collect_mode.state_dict()['model'].items()}
    for k, v in model_weights(learner_policy)['model'].items():
        assert torch.equal(good[k], v)

    # The learner moves on; the copy the collector receives is corrupted on the way.
    learner_policy.learn_mode.forward(make_batch(3))
    store.publish(model_weights(learner_policy), version=2)
    proxy = WeightsProxy(server.url, flip_a_body_byte)
    try:
        tampered = WeightsFollower(WeightsClient(proxy.address, accept_unsigned=True), collector_policy.collect_mode)
        tampered.sha256, tampered.version = follower.sha256, follower.version
        assert tampered.sync() is False
        assert 'sha256' in tampered.last_error and 'refused' in tampered.last_error
        assert tampered.version == 1
        for k, v in collector_policy.collect_mode.state_dict()['model'].items():
            assert torch.equal(v, good[k])  # untouched
    finally:
        proxy.close()
    # Straight from the learner the new version loads.
    assert follower.sync() is True and follower.version == 2


def test_expected_sha_and_incompatible_weights_are_refused(weights_server):
    server, store = weights_server
    store.publish({'model': {'other.weight': torch.zeros(3, 3)}}, version=5)
    client = WeightsClient(server.address, accept_unsigned=True)
    try:
        assert client.fetch(expected_sha256='0' * 64) is None and 'expected' in client.last_error
        collector_policy = make_dqn_policy()
        before = {k: v.clone() for k, v in collector_policy.collect_mode.state_dict()['model'].items()}
        follower = WeightsFollower(client, collector_policy.collect_mode)
        assert follower.sync() is False and 'do not fit the policy' in follower.last_error
        after = collector_policy.collect_mode.state_dict()['model']
        assert all(torch.equal(after[k], v) for k, v in before.items())
    finally:
        client.close()
    unreachable = WeightsClient('127.0.0.1:9', timeout=2)
    assert unreachable.fetch() is None and unreachable.last_status == 'error'
    unreachable.close()


def test_serialisation_round_trip_shared_tensors_and_bad_payloads():
    base = torch.arange(6, dtype=torch.float32)
    state = {'model': {'a': base, 'tied': base, 'view': base[:3]}, 'extra': {'step': torch.tensor(3)}}
    payload = serialize_weights(state, version=3)
    loaded, meta = deserialize_weights(payload)
    assert meta['version'] == '3'
    assert torch.equal(loaded['model']['tied'], base) and torch.equal(loaded['model']['view'], base[:3])
    assert loaded['extra']['step'].item() == 3
    with pytest.raises(WeightsError, match="'model/n'"):
        serialize_weights({'model': {'n': 3}}, 0)
    with pytest.raises(WeightsError, match="without '/'"):
        serialize_weights({'a/b': torch.ones(1)}, 0)
    with pytest.raises(WeightsError, match='not a valid safetensors'):
        deserialize_weights(b'\x00' * 16)
    store = WeightsStore()
    failures = []
    store.add_listener(lambda ok, published, error: failures.append(error) if not ok else None)
    first = store.publish({'model': {'w': torch.ones(2)}}, 1)
    assert store.publish({'model': {'w': 'not a tensor'}}, 2) is None
    assert store.current() is first and store.failures == 1 and 'model/w' in failures[0]


def test_etag_matching_and_transport_names():
    sha = 'ab' * 32
    assert etag_matches(f'"{sha}"', sha) and etag_matches(sha, sha) and etag_matches(f'W/"{sha}"', sha)
    assert etag_matches(f'"x", "{sha}"', sha) and etag_matches('*', sha)
    assert not etag_matches(None, sha) and not etag_matches('"other"', sha)
    assert check_policy_transport('http') == 'http' and check_policy_transport('fs') == 'fs'
    with pytest.raises(ValueError, match='collector.policy_transport must be one of'):
        check_policy_transport('redis', 'collector.policy_transport')
