"""Commander decisions (no network): which tasks start when, what they carry, when the run ends."""

import time

import pytest
from easydict import EasyDict

from ding.config.parallel import compile_config_parallel
from ding.worker.coordinator.base_parallel_commander import (
    TaskSpace,
    create_parallel_commander,
    get_parallel_commander_cls,
)
from ding.worker.coordinator.naive_parallel_commander import NaiveCommander
from ding.worker.coordinator.resource_manager import NaiveResourceManager
from ding.worker.coordinator.solo_parallel_commander import SoloCommander
from tests.helpers.toy_workers import toy_config


@pytest.fixture
def main_cfg(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def make(**kwargs):
        main, create, system = toy_config('cmd', **kwargs)
        return compile_config_parallel(main, create, system, seed=0, save_cfg=False).main

    return make


def _finish(commander, task, **info):
    base = {'eval_flag': task['eval_flag'], 'step_count': 10, 'reward_mean': 0.0, 'policy_iter': 0}
    base.update(info)
    return commander.finish_collector_task(task['task_id'], base)


def test_solo_starts_learner_first_then_fills_collector_space(main_cfg):
    commander = create_parallel_commander(main_cfg(collector_num=2, eval_interval=1000.0))
    assert isinstance(commander, SoloCommander)
    assert commander.get_collector_task() is None  # no learner task, no buffer: nothing to collect for
    learner_task = commander.get_learner_task()
    assert learner_task['buffer_id'] and learner_task['policy_name'].startswith('policy_')
    assert learner_task['max_iterations'] == int(1e9)
    assert commander.get_learner_task() is None  # learner_task_space is 1
    first, second = commander.get_collector_task(), commander.get_collector_task()
    assert commander.get_collector_task() is None  # collector_task_space follows collector_num (2)
    for task in (first, second):
        assert task['buffer_id'] == learner_task['buffer_id']
        assert task['policy_name'] == learner_task['policy_name']
        assert task['eval_flag'] is False
        assert task['policy_kwargs'] == {'eps': 1.0}  # toy schedule at learner step 0
    assert _finish(commander, first) is False
    assert commander.total_collector_env_step == 10
    commander.update_learner_info(learner_task['task_id'], {'learner_step': 50})
    third = commander.get_collector_task()
    assert third['policy_kwargs']['eps'] == pytest.approx(0.5)  # epsilon follows the learner's iterations


def test_solo_evaluates_every_interval_one_at_a_time_and_stops_at_stop_value(main_cfg):
    commander = create_parallel_commander(main_cfg(collector_num=3, eval_interval=0.05, stop_value=20))
    commander.get_learner_task()
    assert commander.get_collector_task()['eval_flag'] is False  # the first eval waits one interval
    time.sleep(0.06)
    evaluation = commander.get_collector_task()
    assert evaluation['eval_flag'] is True and evaluation['policy_kwargs'] == {}
    time.sleep(0.06)
    assert commander.get_collector_task()['eval_flag'] is False  # an evaluation is still running
    assert _finish(commander, evaluation, reward_mean=12.0) is False
    assert commander.best_eval_return == 12.0 and commander.total_collector_env_step == 0
    time.sleep(0.06)
    evaluation = commander.get_collector_task()
    assert evaluation['eval_flag'] is True
    assert _finish(commander, evaluation, reward_mean=20.0) is True
    assert commander.end_flag
    assert commander.get_collector_task() is None and commander.get_learner_task() is None
    assert [e['reward_mean'] for e in commander.eval_history] == [12.0, 20.0]


def test_solo_failed_tasks_free_their_space(main_cfg):
    commander = create_parallel_commander(main_cfg(collector_num=1, eval_interval=1000.0))
    learner_task = commander.get_learner_task()
    task = commander.get_collector_task()
    assert commander.get_collector_task() is None
    commander.notify_fail_collector_task(task)
    assert commander.get_collector_task() is not None
    commander.notify_fail_learner_task(learner_task)
    assert commander.get_learner_task()['task_id'] != learner_task['task_id']


def test_naive_runs_a_fixed_number_of_tasks(main_cfg):
    cfg = main_cfg(
        collector_num=2, commander='naive', commander_extra=dict(collector_task_num=3, collect_setting=dict(eps=0.3))
    )
    commander = create_parallel_commander(cfg)
    assert isinstance(commander, NaiveCommander)
    commander.get_learner_task()
    assert commander.get_learner_task() is None  # learner_task_num is 1
    tasks = [commander.get_collector_task(), commander.get_collector_task()]
    assert commander.get_collector_task() is None  # space 2
    assert all(t['policy_kwargs'] == {'eps': 0.3} for t in tasks)
    assert _finish(commander, tasks[0]) is False
    tasks.append(commander.get_collector_task())
    assert commander.get_collector_task() is None  # 3 tasks in total
    assert _finish(commander, tasks[1]) is False
    commander.notify_fail_collector_task(tasks[2])  # a task given up counts as done: the run cannot hang
    assert commander.end_flag and commander.total_collector_env_step == 20


def test_commander_lookup_names_known_types():
    assert get_parallel_commander_cls(EasyDict(type='solo')) is SoloCommander
    assert get_parallel_commander_cls({'type': 'naive'}) is NaiveCommander
    with pytest.raises(KeyError, match='solo'):
        get_parallel_commander_cls({'type': 'sollo'})
    with pytest.raises(KeyError, match="needs a 'type'"):
        get_parallel_commander_cls({})


def test_task_space_bounds():
    space = TaskSpace(0, 2)
    assert space.acquire_space() and space.acquire_space() and not space.acquire_space()
    space.release_space()
    assert space.get_residual_space() == 1
    space.decrease_space()
    assert not space.acquire_space()
    space.increase_space()
    assert space.acquire_space()
    with pytest.raises(ValueError):
        TaskSpace(2, 1)


def test_resource_manager_assigns_longest_idle_and_forgets_dead_workers():
    rm = NaiveResourceManager()
    rm.update('collector', 'c0', {'cpu': 1})
    rm.update('collector', 'c1', {'cpu': 2})
    first = rm.assign_collector({'task_id': 't0'})
    assert first == {'collector_id': 'c0', 'resource_info': {'cpu': 1}}
    assert rm.have_assigned('collector', 'c0') and rm.snapshot()['collector']['busy'] == {'c0': 't0'}
    assert rm.assign_collector({'task_id': 't1'})['collector_id'] == 'c1'
    assert rm.assign_collector({'task_id': 't2'}) is None
    assert rm.release('collector', 'c1')
    assert rm.delete('collector', 'c0') and not rm.release('collector', 'c0')  # died while busy
    assert rm.assign_collector({'task_id': 't3'})['collector_id'] == 'c1'
    assert rm.assign_learner({'task_id': 'l'}) is None
    with pytest.raises(KeyError, match='unknown worker type'):
        rm.update('evaluator', 'e0', {})
