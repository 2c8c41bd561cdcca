"""Start task fields checked against a comm worker's config (``ding.worker.task_fields``)."""

import pytest

from ding.worker.task_fields import (
    MAX_CONFIG_DEPTH,
    TaskFieldError,
    allowed_imports,
    check_task_imports,
    check_task_names,
    config_import_names,
)


def test_config_import_names_collects_every_section():
    main = {
        'env': {'import_names': ['env_mod'], 'manager': {'import_names': 'manager_mod'}},
        'policy': {'import_names': ['policy_mod', 'env_mod'], 'model': {'import_names': ['model_mod']}},
        'hooks': [{'import_names': ['hook_mod']}],
        'other_env': {'env_id': 'my_envs:Maze-v0'},
    }
    assert config_import_names(main) == ['env_mod', 'manager_mod', 'policy_mod', 'model_mod', 'hook_mod', 'my_envs']


def test_allowed_imports_are_the_workers_own_and_the_listed_ones():
    cfg = {'import_names': ['ding.worker.learner.comm.flask_fs_learner'], 'allowed_import_names': ['ding.policy.dqn']}
    assert allowed_imports(cfg) == {'ding.worker.learner.comm.flask_fs_learner', 'ding.policy.dqn'}
    assert allowed_imports({}) == frozenset()


def test_task_imports_are_checked_anywhere_in_the_task():
    allowed = {'ding.policy.dqn'}
    check_task_imports({'policy': {'import_names': ['ding.policy.dqn']}, 'env': {'import_names': []}}, allowed)
    check_task_imports({'env': {'env_id': 'CartPole-v1'}}, allowed)  # registered ids import nothing
    for task, field in [
        ({'policy': {'model': {'import_names': ['os']}}}, 'policy.model.import_names'),
        ({'env': {'import_names': 'subprocess'}}, 'env.import_names'),
        ({'hooks': [{}, {'import_names': ['x']}]}, 'hooks[1].import_names'),
        ({'policy': {'import_names': {'ding.policy.dqn': 1}}}, 'policy.import_names'),
        ({'policy': {'import_names': [1]}}, 'policy.import_names'),
        ({'env': {'env_id': 'evil.module:Env-v0'}}, 'env.env_id'),
    ]:
        with pytest.raises(TaskFieldError) as info:
            check_task_imports(task, allowed)
        assert info.value.field == field and f"task field '{field}' refused" in str(info.value)


def test_a_task_nested_too_deep_is_refused():
    task: dict = {}
    inner = task
    for _ in range(MAX_CONFIG_DEPTH + 2):
        inner['a'] = {}
        inner = inner['a']
    with pytest.raises(TaskFieldError, match='nested deeper'):
        check_task_imports(task, set())


def test_task_names_must_be_plain():
    check_task_names({'exp_name': 'exp', 'instance_name': None, 'policy_name': ''})
    with pytest.raises(TaskFieldError) as info:
        check_task_names({'policy_name': '../p'}, prefix='resume.')
    assert info.value.field == 'resume.policy_name'
