"""read_config: Python and YAML config files -> (main_config, create_config, system_config)."""

import os
import sys
import textwrap

import pytest

from ding.config import ConfigError, read_config
from tests.helpers.processes import ROOT


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_python_file_with_main_create_and_system_config(tmp_path):
    path = write(
        tmp_path / 'my_config.py',
        """
        from easydict import EasyDict
        main_config = EasyDict(dict(exp_name='exp', policy=dict(learn=dict(batch_size=32))))
        create_config = dict(env=dict(type='cartpole'), policy=dict(type='dqn'))
        system_config = dict(path_data='./data')
    """,
    )
    main, create, system = read_config(path)
    assert main.policy.learn.batch_size == 32  # EasyDict attribute access, nested too
    assert create.policy.type == 'dqn' and create.env.type == 'cartpole'
    assert system.path_data == './data'
    main.policy.learn.batch_size = 1  # a copy: reading again gives the file's value
    assert read_config(path)[0].policy.learn.batch_size == 32


def test_system_config_is_optional(tmp_path):
    path = write(tmp_path / 'c.py', 'main_config = dict(a=1)\ncreate_config = dict(policy=dict(type="dqn"))\n')
    assert read_config(path)[2] is None


def test_di_engine_style_variable_names_are_accepted(tmp_path):
    path = write(
        tmp_path / 'pong_dqn_config.py',
        """
        pong_dqn_config = dict(exp_name='pong', env=dict(stop_value=20))
        pong_dqn_create_config = dict(env=dict(type='atari'), policy=dict(type='dqn'))
        pong_dqn_system_config = dict(comm_learner=dict())
        _private_config = dict(ignored=True)
    """,
    )
    main, create, system = read_config(path)
    assert main.exp_name == 'pong'
    assert create.env.type == 'atari'
    assert system == {'comm_learner': {}}


def test_ambiguous_fallback_names_are_an_error(tmp_path):
    path = write(
        tmp_path / 'two.py',
        """
        a_config = dict(x=1)
        b_config = dict(x=2)
        a_create_config = dict(policy=dict(type='dqn'))
    """,
    )
    with pytest.raises(ConfigError, match=r"several candidates \['a_config', 'b_config'\]"):
        read_config(path)


def test_the_cartpole_dqn_config_of_the_zoo_reads():
    main, create, _ = read_config(os.path.join(ROOT, 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py'))
    assert create.policy.type == 'dqn'
    assert main.env.stop_value == 195


def test_yaml_file(tmp_path):
    path = write(
        tmp_path / 'exp.yaml',
        """
        main_config:
          exp_name: yaml_exp
          env:
            stop_value: .inf
          policy:
            learn: {batch_size: 16, learning_rate: 0.0003}
        create_config:
          env: {type: cartpole}
          policy: {type: ppo}
    """,
    )
    main, create, system = read_config(path)
    assert main.policy.learn.batch_size == 16 and main.env.stop_value == float('inf')
    assert create.policy.type == 'ppo' and system is None


def test_missing_file_names_it(tmp_path):
    missing = str(tmp_path / 'nope_config.py')
    with pytest.raises(ConfigError, match='nope_config.py.*not found'):
        read_config(missing)


def test_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path / 'broken_config.py', 'main_config = dict(\n    a=1,\n    b=,\n)\n')
    with pytest.raises(ConfigError) as info:
        read_config(path)
    assert 'broken_config.py' in str(info.value) and 'line 3' in str(info.value)
    assert isinstance(info.value, ValueError)


def test_error_while_running_the_file_names_file_and_line(tmp_path):
    path = write(tmp_path / 'oops_config.py', 'x = 1\nmain_config = dict(lr=undefined_name)\n')
    with pytest.raises(ConfigError, match=r'oops_config.py.*NameError.*\(line 2\).*undefined_name'):
        read_config(path)


def test_missing_main_config_is_an_error(tmp_path):
    path = write(tmp_path / 'c.py', 'create_config = dict(policy=dict(type="dqn"))\n')
    with pytest.raises(ConfigError, match=r"c.py.*no 'main_config'"):
        read_config(path)
    path = write(tmp_path / 'c.yml', 'create_config: {policy: {type: dqn}}\n')
    with pytest.raises(ConfigError, match=r"c.yml.*no 'main_config'"):
        read_config(path)


def test_non_dict_main_config_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="'main_config' must be a dict"):
        read_config(write(tmp_path / 'c.py', 'main_config = [1]\ncreate_config = {}\n'))
    with pytest.raises(ConfigError, match=r'bad.yaml.*invalid YAML, line 3'):
        read_config(write(tmp_path / 'bad.yaml', 'main_config:\n  a: [1, 2\ncreate_config: {}\n'))
    with pytest.raises(ConfigError, match='unsupported extension'):
        read_config(write(tmp_path / 'c.json', '{}'))


def test_reading_does_not_leave_modules_behind(tmp_path):
    path = write(
        tmp_path / 'c.py',
        'import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int = 1\n'
        'main_config = dict(x=P().x)\ncreate_config = {}\n',
    )
    before = set(sys.modules)
    assert read_config(path)[0].x == 1
    assert [m for m in set(sys.modules) - before if 'config' in m] == []
