"""The run secret and its proofs: where the secret comes from, and what a slave accepts as a connect proof."""

import os

import pytest

from ding.interaction.base.auth import (
    RUN_SECRET_ENV,
    AuthError,
    ConnectVerifier,
    check_accept_proof,
    connect_header,
    new_run_secret,
    resolve_run_secret,
)


def test_the_secret_comes_from_the_file_first_then_the_environment(tmp_path):
    path = tmp_path / 'secret'
    path.write_text('from-the-file-0123456789\n')
    os.chmod(path, 0o600)
    env = {RUN_SECRET_ENV: 'from-the-environment-0123'}
    assert resolve_run_secret(str(path), env) == 'from-the-file-0123456789'
    assert resolve_run_secret(None, env) == 'from-the-environment-0123'
    assert resolve_run_secret(None, {}) is None


def test_a_secret_file_others_can_read_or_a_short_secret_is_refused_without_showing_it(tmp_path):
    path = tmp_path / 'secret'
    path.write_text('shared-with-everyone-0123')
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match='readable by other users') as info:
        resolve_run_secret(str(path))
    assert 'shared-with-everyone' not in str(info.value)
    with pytest.raises(ValueError, match='at least 16') as info:
        resolve_run_secret(None, {RUN_SECRET_ENV: 'short'})
    assert 'short' not in str(info.value).replace('at least', '')
    with pytest.raises(ValueError, match='cannot read secret file'):
        resolve_run_secret(str(tmp_path / 'missing'))


def test_a_proof_is_valid_once_for_its_port_and_secret_only():
    secret = new_run_secret()
    verifier = ConnectVerifier(secret)
    header, nonce = connect_header(secret, 7000)
    assert verifier.verify(header, 7000) == nonce
    with pytest.raises(AuthError, match='used before'):
        verifier.verify(header, 7000)  # replayed
    other, _ = connect_header(secret, 7000)
    with pytest.raises(AuthError, match='does not match'):
        verifier.verify(other, 7001)  # seen by a listener on another port
    wrong, _ = connect_header(new_run_secret(), 7000)
    with pytest.raises(AuthError, match='does not match'):
        verifier.verify(wrong, 7000)
    with pytest.raises(AuthError) as info:
        verifier.verify(None, 7000)
    assert info.value.missing
    with pytest.raises(AuthError, match='not a valid'):
        verifier.verify('Bearer ' + secret, 7000)


def test_the_slave_proof_binds_the_nonce_and_its_token():
    secret = new_run_secret()
    proof = ConnectVerifier(secret).accept_proof('ab' * 16, 'token')
    assert check_accept_proof(secret, 'ab' * 16, 'token', proof)
    assert not check_accept_proof(secret, 'ab' * 16, 'other-token', proof)
    assert not check_accept_proof(new_run_secret(), 'ab' * 16, 'token', proof)
    assert not check_accept_proof(secret, 'ab' * 16, 'token', None)
