"""A real comm learner over HTTP on 127.0.0.1 refuses start tasks whose names, paths or ``import_names`` lead
outside what it was started with: the task fails naming the field, nothing is written outside the test's
directory, the refused module is not imported, and a task already running keeps running."""

import os
import sys

import pytest
from easydict import EasyDict

from ding.worker.learner.comm.task_setup import check_learner_task
from tests.helpers.comm_learner import comm_config, failed, ok, start_task

MARKER = 'tests.helpers.import_marker'


def _task(**fields):
    task = start_task('bad', 2)
    task['task_info'].update(fields)
    return task


def _tree(root):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)


@pytest.fixture
def outside(tmp_path_factory):
    """A directory beside the worker's, which no task may reach."""
    return tmp_path_factory.mktemp('outside')


@pytest.mark.parametrize(
    'field, value',
    [
        ('exp_name', '../escaped_exp'),
        ('exp_name', '.hidden'),
        ('instance_name', 'a/../../escaped_instance'),
        ('instance_name', 'x' * 200),
        ('policy_name', '..'),
        ('policy_name', 'p\\q'),
        ('policy_name', 'p\x00q'),
    ],
)
def test_names_that_are_not_plain_names_are_refused(conn, workdir, field, value):
    message = failed(conn, _task(**{field: value}))
    assert f"task field '{field}' refused" in message
    assert not os.path.exists(workdir.parent / 'escaped_exp')
    assert not os.path.exists(workdir.parent / 'escaped_instance')
    assert not os.path.exists(workdir / 'exp' / 'log' / 'learner0')  # no learner was built for it


@pytest.mark.parametrize('field', ['path_policy', 'path_data'])
def test_directories_outside_the_workers_are_refused(conn, workdir, outside, field):
    for value in (str(outside), os.path.join(str(workdir), field.split('_')[1], '..', '..', 'elsewhere')):
        message = failed(conn, _task(**{field: value}))
        assert f"task field '{field}' refused" in message and 'outside the allowed directories' in message
    assert _tree(outside) == []
    assert not os.path.exists(workdir.parent / 'elsewhere')


def test_a_symbolic_link_out_of_the_policy_directory_is_refused(conn, workdir, outside):
    os.makedirs(workdir / 'policy', exist_ok=True)
    os.symlink(outside, workdir / 'policy' / 'link')
    message = failed(conn, _task(path_policy=str(workdir / 'policy' / 'link')))
    assert "task field 'path_policy' refused" in message and str(outside) in message
    assert _tree(outside) == []


def test_directories_inside_the_workers_are_accepted(conn, workdir):
    inside = workdir / 'policy' / 'sub'
    result = ok(conn, _task(path_policy=str(inside)))
    assert result['task_id'] == 'bad'
    assert (inside / 'policy_learner0.safetensors').exists()


@pytest.mark.parametrize(
    'field, value',
    [
        ('resume', '/etc/passwd'),
        ('resume', {'checkpoint': '../other_run/ckpt/iteration_5.safetensors', 'policy_name': 'policy_learner0'}),
        ('resume', {'checkpoint': 'auto', 'policy_name': '../policy'}),
    ],
)
def test_resume_outside_the_runs_checkpoints_is_refused(conn, field, value):
    message = failed(conn, _task(**{field: value}))
    assert "task field 'resume" in message


def test_a_checkpoint_hook_outside_the_runs_checkpoints_is_refused(conn, outside):
    task = _task()
    task['task_info']['learner_cfg']['hook']['load_ckpt_before_run'] = str(outside / 'iteration_1.safetensors')
    message = failed(conn, task)
    assert "task field 'learner_cfg.hook.load_ckpt_before_run' refused" in message


@pytest.mark.parametrize('where', ['policy', 'policy.model', 'learner_cfg'])
def test_import_names_not_in_the_local_config_are_refused(conn, where):
    task = _task()
    section = task['task_info']
    for key in where.split('.'):
        section = section.setdefault(key, {})
    section['import_names'] = [MARKER]
    message = failed(conn, task)
    assert f"task field '{where}.import_names' refused" in message and MARKER in message
    assert MARKER not in sys.modules


def test_import_names_the_local_config_allows_are_imported(make_comm, master, workdir):
    comm = make_comm(allowed_import_names=['ding.policy.dqn', MARKER])
    conn = master.new_connection('learner0', '127.0.0.1', comm.port)
    conn.connect()
    try:
        task = _task()
        task['task_info']['policy']['import_names'] = ['ding.policy.dqn', MARKER]
        ok(conn, task)
        assert MARKER in sys.modules
    finally:
        conn.disconnect()
        sys.modules.pop(MARKER, None)


def test_a_refused_task_leaves_the_running_one_alone(conn, comm):
    ok(conn, start_task('good', 10**6))
    learner = comm.learner
    failed(conn, _task(exp_name='../escaped_exp'))
    assert comm.learner is learner
    demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'good'}})
    assert demand['batch_size'] > 0


def test_a_worker_without_allowed_import_names_refuses_the_policy_module(make_comm, master):
    comm = make_comm(allowed_import_names=[])
    conn = master.new_connection('learner0', '127.0.0.1', comm.port)
    conn.connect()
    try:
        message = failed(conn, _task())
        assert "task field 'policy.import_names' refused" in message and 'ding.policy.dqn' in message
    finally:
        conn.disconnect()


def test_config_defaults_are_kept_when_the_task_names_none(workdir):
    cfg = EasyDict(comm_config(workdir))
    assert check_learner_task(cfg, start_task('t', 1)['task_info']) == (cfg.path_policy, cfg.path_data)


def test_checkpoints_are_taken_from_the_runs_checkpoint_directories_only(workdir):
    cfg = EasyDict(comm_config(workdir))
    info = start_task('t', 1)['task_info']
    for accepted in ('./exp/ckpt/iteration_3.safetensors', str(workdir / 'exp' / 'ckpt_learner1' / 'iteration_3')):
        check_learner_task(cfg, dict(info, resume=accepted))
        check_learner_task(cfg, dict(info, resume={'checkpoint': accepted, 'policy_name': 'policy_learner0'}))
    for refused in ('./exp/log/x.safetensors', './exp', './exp2/ckpt/x', './exp/ckpt/../../x', './exp/ckptx/y'):
        with pytest.raises(ValueError, match="task field 'resume' refused"):
            check_learner_task(cfg, dict(info, resume=refused))
