"""A real comm collector over HTTP on 127.0.0.1 refuses start tasks whose names, paths or ``import_names`` lead
outside what it was started with: the task fails naming the field, nothing is written outside the test's
directory and the refused module is not imported."""

import os
import sys

import pytest
from easydict import EasyDict

from ding.worker.collector.comm.utils import check_collector_task
from tests.helpers.comm_collector import POLICY_NAME, comm_config, failed, policy_path, start_task

MARKER = 'tests.helpers.import_marker'


def _tree(root):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)


@pytest.fixture
def outside(tmp_path_factory):
    """A directory beside the worker's, which no task may reach."""
    return tmp_path_factory.mktemp('outside')


@pytest.mark.parametrize(
    'field, value',
    [('exp_name', '../escaped_exp'), ('instance_name', '/abs'), ('policy_name', '..'), ('exp_name', 'a' * 129)],
)
def test_names_that_are_not_plain_names_are_refused(conn, workdir, field, value):
    task = start_task('bad', workdir)
    task['task_info'][field] = value
    message = failed(conn, task)
    assert f"task field '{field}' refused" in message
    assert not os.path.exists(workdir.parent / 'escaped_exp')


@pytest.mark.parametrize('field', ['path_data', 'path_policy', 'policy_update_path'])
def test_paths_outside_the_workers_directories_are_refused(conn, workdir, outside, field):
    task = start_task('bad', workdir)
    task['task_info'].pop('path_policy')
    target = outside / (POLICY_NAME + '.safetensors') if field != 'path_data' else outside
    task['task_info'][field] = str(target)
    message = failed(conn, task)
    assert f"task field '{field}' refused" in message and 'outside the allowed directories' in message
    assert _tree(outside) == []


@pytest.mark.parametrize('where', ['env', 'env.manager', 'policy', 'policy.model', 'collector_cfg'])
def test_import_names_not_in_the_local_config_are_refused(conn, workdir, where):
    task = start_task('bad', workdir)
    section = task['task_info']
    for key in where.split('.'):
        section = section.setdefault(key, {})
    section['import_names'] = [MARKER]
    message = failed(conn, task)
    assert f"task field '{where}.import_names' refused" in message and MARKER in message
    assert MARKER not in sys.modules
    assert not os.path.exists(workdir / 'data') or _tree(workdir / 'data') == []


def test_the_policy_file_and_data_directory_inside_are_kept(workdir):
    cfg = EasyDict(comm_config(workdir))
    info = start_task('t', workdir)['task_info']
    assert check_collector_task(cfg, info) == (policy_path(workdir), os.path.join(str(workdir), 'data'))
    info.pop('path_policy')
    info['path_data'] = str(workdir / 'data' / 'sub')
    assert check_collector_task(cfg, info) == (policy_path(workdir), str(workdir / 'data' / 'sub'))


def test_an_env_id_naming_a_module_is_refused(conn, workdir):
    task = start_task('bad', workdir)
    task['task_info']['env']['env_id'] = MARKER + ':Marker-v0'  # gymnasium.make would import the module
    message = failed(conn, task)
    assert "task field 'env.env_id' refused" in message and MARKER in message
    assert MARKER not in sys.modules
