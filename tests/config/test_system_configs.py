"""The system configs in configs/: each combined with a dizoo experiment through ``base`` and compiled;
``base`` and lists of files in read_config."""

import os
import textwrap

import pytest

from ding.config import ConfigError, compile_config, read_config
from ding.config.parallel import compile_config_parallel
from ding.service import check_service_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, 'configs')
CARTPOLE_DQN = os.path.join(ROOT, 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py')
SYSTEM_CONFIGS = sorted(f for f in os.listdir(CONFIGS) if f.endswith('.py'))


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return str(path)


def combined(tmp_path, *system_files):
    """A user's config file building on the CartPole DQN experiment and the given configs/ files."""
    bases = [CARTPOLE_DQN] + [os.path.join(CONFIGS, f) for f in system_files]
    return write(tmp_path / 'my_run.py', f'base = {bases!r}\n')


def test_every_system_config_is_tested_here():
    assert SYSTEM_CONFIGS == [
        'json_logs.py',
        'parallel_one_host.py',
        'parallel_two_hosts.py',
        'parallel_two_hosts_two_learners.py',
        'service.py',
    ]


@pytest.mark.parametrize('name', SYSTEM_CONFIGS)
def test_a_system_config_names_no_env_and_no_policy(name):
    try:
        main, create, _ = read_config(os.path.join(CONFIGS, name))
    except ConfigError as exc:
        assert "no 'create_config' defined" in str(exc)  # a fragment: nothing to build alone
        return
    assert 'env' not in main and 'env' not in create and 'policy' not in create


def test_parallel_one_host_compiles_with_the_cartpole_experiment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main, create, system = read_config(combined(tmp_path, 'parallel_one_host.py'))
    assert create.policy.type == 'dqn' and create.env.type == 'cartpole'  # the experiment's
    assert create.comm_learner.type == 'flask_fs' and create.replay_buffer.type == 'advanced'  # the system's
    out = compile_config_parallel(main, create, system, seed=0, save_cfg=False)
    assert sorted(out.system.learner) == ['learner0']
    assert sorted(out.system.collector) == ['collector0', 'collector1']
    workers = list(out.system.learner.values()) + list(out.system.collector.values())
    assert {w.host for w in workers} == {'127.0.0.1'}
    assert len({w.port for w in workers} | {out.system.coordinator.port}) == 4
    assert out.system.path_data == os.path.join(str(tmp_path), 'cartpole_dqn_seed0', 'data')
    assert out.main.policy.other.commander.eval_interval == 1.0
    assert not os.path.exists(tmp_path / 'cartpole_dqn_seed0')  # compiling started nothing, wrote nothing


def test_parallel_two_hosts_places_the_collectors_on_host_b(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_COLLECTOR_HOST', '192.0.2.7')
    monkeypatch.setenv('DING_SHARED_DIR', str(tmp_path / 'nfs'))
    monkeypatch.setenv('DING_COLLECTOR_PORT', '23000')
    main, create, system = read_config(combined(tmp_path, 'parallel_two_hosts.py'))
    assert create.comm_collector.type == 'flask_fs'  # from parallel_one_host.py, its base
    out = compile_config_parallel(main, create, system, seed=0, save_cfg=False)
    assert out.system.coordinator.host == '0.0.0.0' and out.system.coordinator.port == 22270
    assert out.system.coordinator.port_auto is False  # a given port is never replaced
    assert out.system.coordinator.collector == {
        'collector0': ['collector0', '192.0.2.7', 23000],
        'collector1': ['collector1', '192.0.2.7', 23001],
    }
    assert out.system.learner.learner0.host == '127.0.0.1'
    assert out.system.path_policy == str(tmp_path / 'nfs' / 'cartpole_dqn_seed0' / 'policy')
    assert out.system.collector.collector1.path_data == str(tmp_path / 'nfs' / 'cartpole_dqn_seed0' / 'data')


def test_parallel_two_hosts_two_learners_splits_the_learners_between_the_hosts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_HOST_A', '192.0.2.1')
    monkeypatch.setenv('DING_HOST_B', '192.0.2.2')
    monkeypatch.setenv('DING_SHARED_DIR', str(tmp_path / 'nfs'))
    main, create, system = read_config(combined(tmp_path, 'parallel_two_hosts_two_learners.py'))
    out = compile_config_parallel(main, create, system, seed=0, save_cfg=False)
    assert out.system.coordinator.host == '192.0.2.1' and out.system.coordinator.port == 22270
    assert out.system.coordinator.learner == {
        'learner0': ['learner0', '192.0.2.1', 22271],
        'learner1': ['learner1', '192.0.2.2', 22272],
    }
    assert out.system.coordinator.collector == {'collector0': ['collector0', '192.0.2.2', 22273]}
    assert out.system.coordinator.dist_port == 22274  # the learner group's rendezvous, on learner0's host
    assert out.main.policy.learn.learner.multi_learner.mode == 'data_parallel'
    assert out.main.policy.other.commander.eval_interval == 0.5
    assert out.system.path_data == str(tmp_path / 'nfs' / 'cartpole_dqn_seed0' / 'data')


@pytest.mark.parametrize(
    ('files', 'expected'),
    [
        (['service.py'], dict(enable=True, host='127.0.0.1', port=0, json_log=False)),
        (['json_logs.py'], dict(enable=False, json_log=True, json_log_every=100)),
        (['service.py', 'json_logs.py'], dict(enable=True, json_log=True)),
    ],
)
def test_service_and_json_logs_compile_with_the_serial_experiment(tmp_path, monkeypatch, files, expected):
    monkeypatch.chdir(tmp_path)
    main, create, _ = read_config(combined(tmp_path, *files))
    service = check_service_config(main.service)
    for key, value in expected.items():
        assert service[key] == value, key
    cfg = compile_config(main, seed=0, auto=True, create_cfg=create, save_cfg=False)
    assert cfg.service == main.service
    assert cfg.policy.learn.batch_size == 64  # the experiment is unchanged


def test_base_paths_are_relative_to_the_file_and_its_own_dicts_win(tmp_path):
    (tmp_path / 'parts').mkdir()
    write(
        tmp_path / 'parts' / 'exp.py',
        "main_config = dict(a=1, nested=dict(x=1, y=1))\ncreate_config = dict(env=dict(type='e'))\n",
    )
    write(tmp_path / 'parts' / 'sys.yaml', 'main_config:\n  nested:\n    y: 2\nsystem_config:\n  path_data: /d\n')
    path = write(tmp_path / 'run.py', "base = ['parts/exp.py', 'parts/sys.yaml']\nmain_config = dict(a=3)\n")
    main, create, system = read_config(path)
    assert main == {'a': 3, 'nested': {'x': 1, 'y': 2}}
    assert create.env.type == 'e' and system.path_data == '/d'


def test_yaml_base_and_a_list_of_files_read_alike(tmp_path):
    exp = write(tmp_path / 'exp.py', "main_config = dict(a=1)\ncreate_config = dict(env=dict(type='e'))\n")
    system = write(tmp_path / 'sys.py', "system_config = dict(path_data='/d')\nmain_config = dict(b=2)\n")
    yaml_run = write(tmp_path / 'run.yaml', 'base: [exp.py, sys.py]\n')
    assert (
        read_config(yaml_run)
        == read_config([exp, system])
        == ({'a': 1, 'b': 2}, {'env': {'type': 'e'}}, {'path_data': '/d'})
    )


def test_base_errors_name_the_files(tmp_path):
    loop_a = write(tmp_path / 'a.py', "base = 'b.py'\n")
    write(tmp_path / 'b.py', "base = 'a.py'\n")
    with pytest.raises(ConfigError, match='loops back'):
        read_config(loop_a)
    missing = write(tmp_path / 'm.py', "base = 'nowhere.py'\n")
    with pytest.raises(ConfigError, match=r"nowhere\.py' not found \(named in"):
        read_config(missing)
    bad = write(tmp_path / 'bad.py', 'base = 3\n')
    with pytest.raises(ConfigError, match="'base' must be a path or a list of paths"):
        read_config(bad)
    with pytest.raises(ConfigError, match='no config file given'):
        read_config([])
