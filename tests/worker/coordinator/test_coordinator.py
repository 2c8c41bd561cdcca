"""The coordinator driving real toy slaves over HTTP: data flow, end of run, failures and reassignment."""

import os
import time

import requests

from ding.utils.file_transport import load_policy
from tests.helpers.wait import wait_until


def test_solo_run_moves_metadata_from_collectors_to_learner_until_the_stop_value(toy_cluster):
    cluster = toy_cluster(stop_value=12, batch_size=4)
    summary = cluster.run()
    learner = cluster.learners[0]
    assert summary['solved'] and 'stop value' in summary['reason']
    assert summary['best_eval_return'] >= 12 and summary['train_iter'] >= 12
    assert summary['failed_tasks'] == []
    # every batch had batch_size metadata and every data_id named a real sample file
    assert learner.batches and set(learner.batches) == {4} and learner.bad_samples == 0
    assert summary['sampled_batches'] >= len(learner.batches)
    learner_task = learner.started_tasks[0]
    assert learner_task['instance_name'] == 'learner0'
    assert learner_task['path_policy'] == cluster.cfg.system.path_policy
    # one buffer per learner task: every collector task wrote into it, read the learner's policy file
    tasks = [t for c in cluster.collectors for t in c.tasks]
    assert {t['buffer_id'] for t in tasks} == {learner_task['buffer_id']}
    policy_file = os.path.join(cluster.cfg.system.path_policy, learner_task['policy_name'] + '.safetensors')
    assert {t['path_policy'] for t in tasks} == {policy_file}
    assert load_policy(policy_file)[1] == learner.iter
    assert any(t['eval_flag'] for t in tasks) and any(not t['eval_flag'] for t in tasks)
    assert {t['instance_name'] for t in tasks} == {'collector0', 'collector1'}  # both collectors worked
    assert cluster.coordinator.replay_buffer(learner_task['buffer_id']) is None  # closed with the coordinator
    assert os.path.isfile('toy/log/coordinator/coordinator_logger.txt')
    # the sample files went away with the buffers that referred to them; the weights stay. A toy collector
    # may have written one last file whose answer the closing coordinator never received (the real comm
    # collector deletes such unsent chunks itself; the toy does not): at most one per collector.
    left = [n for n in os.listdir(cluster.cfg.system.path_data) if n.endswith('.safetensors')]
    assert len(left) <= len(cluster.collectors), left
    assert os.path.isfile(policy_file)


def test_naive_run_ends_after_its_fixed_tasks(toy_cluster):
    cluster = toy_cluster(
        commander='naive', stop_value=1e9, commander_extra=dict(collector_task_num=3, collect_setting=dict(eps=0.2))
    )
    summary = cluster.run()
    tasks = [t for c in cluster.collectors for t in c.tasks]
    assert len(tasks) == 3 and all(t['policy_kwargs'] == {'eps': 0.2} for t in tasks)
    assert summary['env_step'] == 3 * 4 * 8  # 3 tasks of 4 answers of 8 samples
    assert summary['pushed_samples'] == summary['env_step']
    assert not summary['solved'] and summary['reason'] == 'all 3 collector tasks are done'


def test_max_train_iter_ends_the_run_unsolved(toy_cluster):
    cluster = toy_cluster(stop_value=1e9)
    cluster.coordinator.max_train_iter = 5
    summary = cluster.run()
    assert not summary['solved'] and summary['reason'] == 'max_train_iter reached'
    assert summary['train_iter'] >= 5


def test_dead_collector_is_noticed_and_its_task_goes_to_a_live_one(toy_cluster):
    # collector0's tasks are long, so it certainly dies in the middle of one; collector1's are short.
    slow, quick = dict(calls_per_task=1000, step_sleep=0.05), dict(calls_per_task=3)
    cluster = toy_cluster(stop_value=15, collector_kwargs=(slow, quick), eval_interval=1.0)
    cluster.coordinator.start()
    victim, survivor = cluster.collectors
    assert wait_until(lambda: victim.in_data_task.is_set())
    task_id = victim.task_info['task_id']
    killed_at = time.time()
    victim.close()  # the server stops answering and sends no more heartbeats, as after a SIGKILL
    assert wait_until(lambda: any(t['task_id'] == task_id for t in survivor.tasks), timeout=15)
    noticed_after = time.time() - killed_at
    assert noticed_after < cluster.cfg.system.coordinator.heartbeat_tolerance + 5
    assert wait_until(lambda: cluster.coordinator.system_shutdown_flag, timeout=30)
    cluster.coordinator.close()
    summary = cluster.coordinator.summary()
    assert summary['solved']
    failed = summary['failed_tasks']
    assert [f['task_id'] for f in failed] == [task_id] and failed[0]['worker'] == 'collector0'


def test_dead_learner_task_moves_to_the_other_learner_and_resumes(toy_cluster):
    cluster = toy_cluster(stop_value=25, learner_kwargs=({'iter_sleep': 0.02}, {'iter_sleep': 0.02}))
    cluster.coordinator.start()
    assert wait_until(lambda: any(learner.iter >= 5 for learner in cluster.learners))
    victim = next(learner for learner in cluster.learners if learner.task_info is not None)
    survivor = next(learner for learner in cluster.learners if learner is not victim)
    task_id = victim.task_info['task_id']
    cluster.coordinator.notify_worker_dead('learner', 'learner0' if victim is cluster.learners[0] else 'learner1')
    victim.close()
    assert wait_until(lambda: survivor.started_tasks, timeout=10)
    moved = survivor.started_tasks[0]
    assert moved['task_id'] == task_id and moved['resume'] is not None
    assert moved['instance_name'] != victim.started_tasks[0]['instance_name']
    assert wait_until(lambda: cluster.coordinator.system_shutdown_flag, timeout=30)
    cluster.coordinator.close()
    assert cluster.coordinator.summary()['solved']
    # the task kept its buffer and its policy file; the survivor went on from the published iteration
    assert moved['buffer_id'] == victim.started_tasks[0]['buffer_id']
    assert survivor.iter > 5 and len(survivor.batches) < survivor.iter


def test_hung_collector_times_out_and_its_task_is_reassigned(toy_cluster):
    cluster = toy_cluster(
        stop_value=30,
        collector_kwargs=({'hang': True}, {}),
        learner_kwargs=({'iter_sleep': 0.05},),
        coordinator=dict(collector_request_timeout=1.0),
    )
    summary = cluster.run(timeout=40)
    assert summary['solved']
    hung_tasks = {t['task_id'] for t in cluster.collectors[0].tasks}
    assert hung_tasks and hung_tasks <= {t['task_id'] for t in cluster.collectors[1].tasks}
    assert any('timed out' in f['reason'] for f in summary['failed_tasks'])


def test_max_staleness_keeps_stale_metadata_from_the_learner(toy_cluster):
    # Collectors load the weights only when a task starts, so their data falls behind the learner.
    stale = dict(read_policy_every_call=False, calls_per_task=12, samples_per_call=4)
    cluster = toy_cluster(
        stop_value=20,
        collector_kwargs=(stale, stale),
        eval_interval=0.3,
        replay_buffer=dict(max_staleness=3, priority=False),
    )
    summary = cluster.run(timeout=40)
    assert summary['solved']
    assert cluster.learners[0].max_lag <= 3
    assert summary['buffer_stale_removed'] > 0
    assert summary['policy_lag']['max'] <= 3


def test_malformed_requests_to_the_master_get_4xx_and_change_nothing(toy_cluster):
    cluster = toy_cluster(stop_value=10)
    cluster.coordinator.start()
    master = cluster.coordinator.interaction.master
    url = master.address
    assert wait_until(lambda: cluster.coordinator.train_iter >= 2)
    session = requests.Session()
    session.trust_env = False
    answers = [
        session.put(url + '/slave/task/complete', data=b'not json', timeout=5),
        session.put(
            url + '/slave/task/complete', json={'task': {'id': 'x'}, 'result': {}}, timeout=5, headers={'Channel': '0'}
        ),
        session.put(
            url + '/slave/task/fail', json={'task': {'id': 'x'}}, timeout=5, headers={'Channel': '0', 'Token': 'forged'}
        ),
        session.get(url + '/slave/heartbeat', headers={'Channel': '7', 'Token': 'forged'}, timeout=5),
        session.post(url + '/no/such/route', json={}, timeout=5),
        session.delete(url + '/shutdown', headers={'Token': 'forged'}, timeout=5),
    ]
    session.close()
    assert all(400 <= r.status_code < 500 for r in answers), [r.status_code for r in answers]
    assert all(r.json()['success'] is False for r in answers)
    assert master.ping()  # still serving: the forged shutdown was refused
    assert wait_until(lambda: cluster.coordinator.system_shutdown_flag, timeout=30)
    cluster.coordinator.close()
    summary = cluster.coordinator.summary()
    assert summary['solved'] and summary['failed_tasks'] == []


def test_pacing_holds_collectors_to_a_few_samples_per_learner_iteration(toy_cluster):
    cluster = toy_cluster(
        stop_value=1e9,
        coordinator=dict(max_samples_per_iter=2, pacing_warmup_samples=16),
        learner_kwargs=({'iter_sleep': 0.01},),
    )
    cluster.coordinator.max_train_iter = 40
    summary = cluster.run()
    assert summary['reason'] == 'max_train_iter reached'
    # at most one answer (8 samples) per collector beyond the budget: each was asked while it was open
    assert summary['pushed_samples'] <= 16 + 2 * summary['train_iter'] + 2 * 8
    assert summary['train_iter'] >= 40  # and the learner was never starved into a deadlock
