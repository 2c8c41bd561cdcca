"""Config dumps hold no secret: ``service.token`` and the like are written as '<redacted>' by every writer."""

import json

import pytest
import yaml

from ding.config import ConfigError, read_config, save_config, save_config_py
from ding.config.parallel import save_parallel_config
from ding.config.writer import REDACTED, is_secret_key, redact_secrets
from ding.service import check_service_config

SECRET = 'do-not-leak-3f9a2c'


def _config():
    return {
        'exp_name': 'secret_exp',
        'seed': 0,
        'env': {'type': 'cartpole', 'import_names': ['dizoo.classic_control.cartpole.envs.cartpole_env']},
        'policy': {'type': 'dqn', 'model': {'eos_token': '</s>', 'token_num': 3}},
        'service': {'enable': True, 'token': SECRET, 'port': 0},
        'remote': [{'api_key': SECRET, 'host': 'h'}, ('run_secret', 'x')],
    }


def test_secret_keys_are_redacted_and_nothing_else():
    out = redact_secrets(_config())
    assert out['service'] == {'enable': True, 'token': REDACTED, 'port': 0}
    assert out['remote'][0] == {'api_key': REDACTED, 'host': 'h'}
    assert out['remote'][1] == ('run_secret', 'x')  # a value, not a key: nothing says it is secret
    assert out['policy'] == _config()['policy']  # an NLP token is no secret; a number is never redacted
    assert redact_secrets({'service': {'token': None}}) == {'service': {'token': None}}  # None: generate one
    assert is_secret_key('DB_PASSWORD') and is_secret_key('run_secret') and not is_secret_key('secret_file')


def test_total_config_py_holds_no_token_and_reads_back_refused(tmp_path):
    path = tmp_path / 'total_config.py'
    save_config_py(_config(), str(path))
    text = path.read_text()
    assert SECRET not in text and repr(REDACTED) in text
    main, _, _ = read_config(str(path))
    assert main.service.token == REDACTED
    # A dump run again does not serve with the well-known placeholder as its token.
    with pytest.raises(ConfigError, match="service.token: '<redacted>' comes from a config dump"):
        check_service_config(main.service)


def test_yaml_dump_holds_no_token(tmp_path):
    path = tmp_path / 'total_config.yaml'
    save_config(_config(), str(path), type_='yaml')
    assert SECRET not in path.read_text()
    assert yaml.safe_load(path.read_text())['main_config']['service']['token'] == REDACTED


def test_parallel_total_config_holds_no_token(tmp_path):
    path = tmp_path / 'total_config.py'
    system = {'path_data': './data', 'coordinator': {'host': '127.0.0.1', 'auth_token': SECRET}}
    save_parallel_config({'main': _config(), 'system': system}, {'policy': {'type': 'dqn'}}, str(path))
    text = path.read_text()
    assert SECRET not in text and text.count(repr(REDACTED)) == 3
    json.dumps(redact_secrets({'main': _config()}))  # plain data: what parallel_config.json is written from
