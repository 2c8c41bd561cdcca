"""compile_config_parallel / parallel_transform: defaults, worker entries, ports, paths, errors."""

import os
import socket

import pytest
from easydict import EasyDict

from ding.config.errors import ConfigError
from ding.config.loader import read_config
from ding.config.parallel import compile_config_parallel, parallel_transform
from tests.helpers.processes import ROOT

CONFIG = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_config.py')


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(('127.0.0.1', port))
            return True
        except OSError:
            return False


def test_cartpole_parallel_config_compiles_with_every_process_named(in_tmp):
    main, create, system = read_config(CONFIG)
    cfg = compile_config_parallel(main, create, system, seed=3)
    assert cfg.seed == cfg.main.seed == 3
    policy = cfg.main.policy
    assert policy.type == 'dqn_command' and policy.learn.learner.send_policy_freq >= 1
    assert policy.collect.collector.type == 'zergling' and policy.collect.collector.collector_num == 2
    assert policy.other.commander.type == 'solo' and policy.other.commander.collector_task_space == 2
    assert policy.other.replay_buffer.type == 'advanced'
    sys_cfg = cfg.system
    assert sorted(sys_cfg.learner) == ['learner0'] and sorted(sys_cfg.collector) == ['collector0', 'collector1']
    assert sys_cfg.path_data == str(in_tmp / 'cartpole_dqn_parallel' / 'data')  # '{exp_name}' resolved
    ports = [sys_cfg.coordinator.port] + [e.port for k in ('learner', 'collector') for e in sys_cfg[k].values()]
    assert len(set(ports)) == 4 and all(_free(p) for p in ports)
    assert sys_cfg.coordinator.port_auto is True  # chosen here: the coordinator may take another at start
    entry = sys_cfg.collector.collector1
    assert entry.type == 'flask_fs' and entry.path_policy == sys_cfg.path_policy
    assert sys_cfg.coordinator.collector.collector1 == ['collector1', '127.0.0.1', entry.port]
    assert sys_cfg.coordinator.heartbeat_tolerance == 15.0  # coordinator defaults merged in
    # the saved file reads back as a parallel config
    main2, create2, system2 = read_config('cartpole_dqn_parallel/total_config.py')
    assert main2.policy.collect.collector.collector_num == 2 and create2.comm_learner.type == 'flask_fs'
    assert system2.collector.collector0.port == sys_cfg.collector.collector0.port


def test_collector_task_space_follows_collector_num_unless_given(in_tmp):
    main, create, system = read_config(CONFIG)
    main.policy.collect.collector.collector_num = 4
    assert (
        compile_config_parallel(main, create, system, save_cfg=False).main.policy.other.commander.collector_task_space
        == 4
    )
    main.policy.other.commander.collector_task_space = 1
    cfg = compile_config_parallel(main, create, system, save_cfg=False)
    assert cfg.main.policy.other.commander.collector_task_space == 1 and len(cfg.system.collector) == 4


def test_bad_keys_are_reported_with_their_path(in_tmp):
    main, create, system = read_config(CONFIG)
    main.policy.other.commander.eval_intervall = 3
    with pytest.raises(ConfigError, match='policy.other.commander.eval_intervall'):
        compile_config_parallel(main, create, system, save_cfg=False)
    main, create, system = read_config(CONFIG)
    create.commander.type = 'sollo'
    with pytest.raises(ConfigError, match='solo'):
        compile_config_parallel(main, create, system, save_cfg=False)
    main, create, system = read_config(CONFIG)
    create.pop('comm_collector')
    with pytest.raises(ConfigError, match='comm_collector'):
        compile_config_parallel(main, create, system, save_cfg=False)
    with pytest.raises(ConfigError, match='platform'):
        compile_config_parallel(main, create, system, save_cfg=False, platform='k8s')


def _raw(**system):
    main = EasyDict(
        exp_name='exp',
        policy=dict(learn=dict(learner=dict(learner_num=2)), collect=dict(collector=dict(collector_num=1))),
    )
    base = dict(comm_learner=dict(type='flask_fs'), comm_collector=dict(type='flask_fs'))
    base.update(system)
    return EasyDict(main=main, system=base)


def test_parallel_transform_keeps_given_entries_and_spreads_hosts(in_tmp):
    cfg = parallel_transform(
        _raw(learner=dict(learner1=dict(port=23456, heartbeat_span=1.0))), learner_host=['127.0.0.1', 'localhost']
    )
    assert cfg.system.learner.learner0.host == '127.0.0.1'
    assert cfg.system.learner.learner1.host == 'localhost'
    assert cfg.system.learner.learner1.port == 23456 and cfg.system.learner.learner1.heartbeat_span == 1.0
    assert cfg.system.coordinator.learner.learner1 == ['learner1', 'localhost', 23456]
    assert os.path.isabs(cfg.system.path_policy) and cfg.system.path_policy.endswith(os.path.join('exp', 'policy'))


def test_parallel_transform_refuses_what_it_cannot_fill(in_tmp):
    with pytest.raises(ConfigError, match="learner.learner0.port is 'auto'"):
        parallel_transform(_raw(learner=dict(learner0=dict(host='203.0.113.9'))))
    with pytest.raises(ConfigError, match='communication_mode'):
        parallel_transform(_raw(communication_mode='manual'))
    with pytest.raises(ConfigError, match='port must be'):
        parallel_transform(_raw(coordinator=dict(port=70000)))


TWO_LEARNERS = os.path.join(
    ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_two_learners_config.py'
)


def test_two_learner_config_gets_a_rendezvous_port_on_learner0(in_tmp):
    main, create, system = read_config(TWO_LEARNERS)
    cfg = compile_config_parallel(main, create, system, save_cfg=False)
    multi = cfg.main.policy.learn.learner.multi_learner
    assert multi.mode == 'data_parallel' and multi.assignment == 'random' and multi.backend == 'gloo'
    assert sorted(cfg.system.learner) == ['learner0', 'learner1']
    port = cfg.system.coordinator.dist_port
    taken = [cfg.system.coordinator.port] + [e.port for k in ('learner', 'collector') for e in cfg.system[k].values()]
    assert isinstance(port, int) and port not in taken and _free(port)
    # the failover default keeps no rendezvous
    main, create, system = read_config(CONFIG)
    assert compile_config_parallel(main, create, system, save_cfg=False).system.coordinator.dist_port is None
    # a port given for a multi-host run is kept; a bad one is named
    main, create, system = read_config(TWO_LEARNERS)
    system.coordinator.dist_port = 29577
    assert compile_config_parallel(main, create, system, save_cfg=False).system.coordinator.dist_port == 29577
    system.coordinator.dist_port = 70000
    with pytest.raises(ConfigError, match='coordinator.dist_port'):
        compile_config_parallel(main, create, system, save_cfg=False)


@pytest.mark.parametrize(
    'change, message',
    [
        (dict(mode='data_paralel'), "multi_learner.mode = str 'data_paralel' is not one of"),
        (dict(assignment='bin'), 'multi_learner.assignment'),
        (dict(on_group_done='help'), 'multi_learner.on_group_done'),
        (dict(timeout=0), 'multi_learner.timeout'),
    ],
)
def test_bad_multi_learner_settings_are_named(in_tmp, change, message):
    main, create, system = read_config(TWO_LEARNERS)
    main.policy.learn.learner.multi_learner.update(change)
    with pytest.raises(ConfigError, match=message):
        compile_config_parallel(main, create, system, save_cfg=False)


def test_data_parallel_refuses_what_would_break_the_lock_step(in_tmp):
    main, create, system = read_config(TWO_LEARNERS)
    main.policy.learn.learner.max_staleness = 100
    with pytest.raises(ConfigError, match='max_staleness must be left out'):
        compile_config_parallel(main, create, system, save_cfg=False)
    main, create, system = read_config(TWO_LEARNERS)
    main.policy.learn.learner.learner_num = 3
    main.policy.learn.learner.multi_learner.assignment = 'bins'
    with pytest.raises(ConfigError, match=r'collector_num \(2\) must be >= policy.learn.learner.learner_num \(3\)'):
        compile_config_parallel(main, create, system, save_cfg=False)
