"""A slave with a run secret: only a master that proves the secret connects, before the body is read; a bound
slave refuses other masters; a master with a secret refuses a slave that cannot prove it back."""

import pytest
import requests

from ding.interaction import SlaveErrorCode, SlaveNotAuthenticated
from ding.interaction.base.auth import new_run_secret
from ding.interaction.exception import SlaveMasterSecretNotGiven, SlaveMasterSecretNotMatch, SlaveSlaveAlreadyConnected
from tests.helpers.interaction import FAST_SLAVE, CalcSlave

SECRET = new_run_secret()


def test_a_master_with_the_secret_connects_and_works(make_master, make_slave):
    slave = make_slave(secret=SECRET)
    master = make_master(secret=SECRET)
    conn = master.new_connection('s', '127.0.0.1', slave.port)
    conn.connect()
    assert slave.is_connected and slave.requires_secret
    assert conn.new_task({'op': 'add', 'a': 1, 'b': 2}).start().join(5).result == {'sum': 3}


@pytest.mark.parametrize(
    'master_secret, error', [(None, SlaveMasterSecretNotGiven), (new_run_secret(), SlaveMasterSecretNotMatch)]
)
def test_a_master_without_the_secret_is_refused_and_changes_nothing(make_master, make_slave, master_secret, error):
    slave = make_slave(secret=SECRET)
    master = make_master(secret=master_secret)
    with pytest.raises(error) as info:
        master.new_connection('s', '127.0.0.1', slave.port).connect()
    assert info.value.status_code == (401 if master_secret is None else 403)
    assert not slave.is_connected
    # the rightful master still connects
    make_master(secret=SECRET).new_connection('s', '127.0.0.1', slave.port).connect()
    assert slave.is_connected


def test_an_unauthenticated_body_is_never_parsed():
    # A body that would be a 400 if parsed: the answer is about the missing proof, so it was not read.
    with CalcSlave(port=0, secret=SECRET, **FAST_SLAVE) as slave, requests.Session() as session:
        session.trust_env = False
        answer = session.post(
            f'http://127.0.0.1:{slave.port}/connect', data=b'{not json', headers={'Channel': '0', 'Token': 't'}
        )
        assert answer.status_code == 401 and answer.json()['code'] == SlaveErrorCode.MASTER_SECRET_NOT_GIVEN
        answer = session.post(
            f'http://127.0.0.1:{slave.port}/connect',
            data=b'{not json',
            headers={'Channel': '0', 'Token': 't', 'Authorization': 'Bearer ' + SECRET},
        )
        assert answer.status_code == 403 and answer.json()['code'] == SlaveErrorCode.MASTER_SECRET_NOT_MATCH
        assert SECRET not in answer.text


def test_a_bound_slave_refuses_a_second_master_with_the_right_secret(make_master, make_slave):
    slave = make_slave(secret=SECRET)
    first = make_master(secret=SECRET)
    first.new_connection('s', '127.0.0.1', slave.port).connect()
    with pytest.raises(SlaveSlaveAlreadyConnected) as info:
        make_master(secret=SECRET).new_connection('s', '127.0.0.1', slave.port).connect()
    assert info.value.status_code == 409
    assert slave.master_address == first.address


def test_a_master_with_a_secret_refuses_a_slave_that_cannot_prove_it(make_master, make_slave):
    squatter = make_slave()  # accepts anyone, knows no secret
    master = make_master(secret=SECRET)
    with pytest.raises(SlaveNotAuthenticated, match='not a slave of this run'):
        master.new_connection('s', '127.0.0.1', squatter.port).connect()
    assert 's' not in master
