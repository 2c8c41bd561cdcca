"""The collector side of the parallel pipeline: a real FlaskFileSystemCollector driven over HTTP by a real Master
acting as the coordinator, collecting from real CartPole envs with a real DQN policy whose weights come from
policy files written with ``save_policy``."""

import os
import threading

import torch

from ding.utils.atomic_file import STORAGE_REFUSAL
from ding.utils.file_transport import SampleReader
from tests.helpers.comm_collector import (
    close_task,
    collect_until,
    data_task,
    failed,
    log_text,
    ok,
    policy_path,
    publish,
    run_task,
    run_to_finish,
    start_task,
)
from tests.helpers.wait import wait_until


def _task_threads():
    return [
        t
        for t in threading.enumerate()
        if t.name in ('ding-collector0-collect', 'ding-collector0-eval', 'ding-collector0-write') and t.is_alive()
    ]


def _data_files(workdir):
    return sorted(n for n in os.listdir(os.path.join(workdir, 'data')) if n.endswith('.safetensors'))


def test_resource_unknown_tasks_and_data_before_start(conn):
    resource = ok(conn, {'name': 'resource'})
    assert isinstance(resource['cpu'], int) and resource['cpu'] >= 1
    assert isinstance(resource['gpu'], int) and resource['gpu'] >= 0

    message = failed(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': 'x'}})
    assert "unknown task name 'learner_learn_task'" in message and 'collector_data_task' in message
    assert 'None' in failed(conn, {'task_info': {}})
    assert 'no collector task is running' in failed(conn, data_task('nothing'))
    assert "'task_info' must be a dict" in failed(conn, {'name': 'collector_data_task'})
    # Closing when nothing runs is harmless (the coordinator closes best-effort at shutdown).
    assert ok(conn, close_task('nothing'))['message'] == 'no collector task to close'


def test_collect_task_writes_dqn_samples_and_reports_finish_info(conn, comm, workdir):
    weights = publish(workdir, policy_iter=3)
    assert ok(conn, start_task('t1', workdir, n_sample=40, chunk_size=16))['message'] == 'collector task has started'

    metadata, finish = run_to_finish(conn, 't1')

    # One metadata dict per sample, produced by the weights of iteration 3 loaded from the policy file.
    assert len(metadata) >= 40
    assert {m['policy_iter'] for m in metadata} == {3}
    assert all(
        m['collect_iter'] == 3 and m['task_id'] == 't1' and m['unroll_len'] == 1 and m['priority'] == 1.0
        for m in metadata
    )
    assert {m['env_id'] for m in metadata} == {0, 1}
    assert len({m['data_id'] for m in metadata}) == len(metadata)
    torch.testing.assert_close(comm.collector.policy.state_dict()['model'], weights)

    # Every data_id loads as a real DQN training sample made by that env.
    reader = SampleReader(os.path.join(workdir, 'data'))
    dones = 0
    for meta in metadata:
        sample = reader.read(meta['data_id'])
        assert sample['obs'].shape == (4,) and sample['next_obs'].shape == (4,)
        assert sample['obs'].dtype == torch.float32
        assert sample['action'].dtype == torch.int64 and int(sample['action']) in (0, 1)
        assert float(sample['reward']) == 1.0  # CartPole pays 1 per step
        assert sample['env_id'] == meta['env_id'] and sample['collect_iter'] == 3
        dones += bool(sample['done'])
    # Chunks: one file per at least chunk_size samples.
    assert len(_data_files(workdir)) <= len(metadata) // 16 + 1

    assert finish['task_id'] == 't1' and finish['eval_flag'] is False and finish['collector_done'] is True
    assert finish['sample_count'] == len(metadata)
    # DQN with nstep=1: one sample per env step, except the few steps of unfinished trajectory pieces.
    assert len(metadata) <= finish['step_count'] <= len(metadata) + 2 * 4
    assert finish['policy_iter'] == 3 and finish['collect_setting'] == {'eps': 0.5}
    assert finish['episode_count'] >= dones
    if finish['episode_count']:
        assert 1.0 <= finish['reward_min'] <= finish['reward_mean'] <= finish['reward_max'] <= 200.0

    # The finish info is answered again until the coordinator closes the task.
    assert ok(conn, data_task('t1'))['finish_info']['sample_count'] == len(metadata)
    closed = ok(conn, close_task('t1'))
    assert closed['message'] == 'collector task has closed' and closed['finish_info']['sample_count'] == len(metadata)
    assert 'was closed' in failed(conn, data_task('t1'))
    assert wait_until(lambda: not _task_threads())


def test_newer_policy_is_loaded_and_bad_policy_files_are_skipped(conn, comm, workdir):
    path = policy_path(workdir)
    ok(conn, start_task('t1', workdir))
    # No policy file yet: the collector acts with its initial weights (version 0) and says so once.
    first = collect_until(conn, 't1', lambda m: len(m) >= 16)
    assert {m['policy_iter'] for m in first} == {0}
    missing = [line for line in log_text(workdir).splitlines() if 'not found' in line]
    assert len(missing) == 1 and f'policy file {path} skipped' in missing[0] and ' INFO ' in missing[0]

    w5 = publish(workdir, policy_iter=5)
    later = collect_until(conn, 't1', lambda m: m[-1]['policy_iter'] == 5)
    torch.testing.assert_close(comm.collector.policy.state_dict()['model'], w5)

    # A corrupt file (same size, flipped bytes: the sha256 check fails) is logged with its path and skipped.
    # (The coordinator keeps asking for data meanwhile: a collector whose queue is full does not collect.)
    with open(path, 'r+b') as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    during = collect_until(conn, 't1', lambda m: 'sha256 mismatch' in log_text(workdir))
    line = next(line for line in log_text(workdir).splitlines() if 'sha256 mismatch' in line)
    assert f'policy file {path} skipped' in line and 'keeping the weights of policy_iter 5' in line
    # A truncated file too.
    with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) // 2)
    during += collect_until(conn, 't1', lambda m: 'truncated' in log_text(workdir))
    # Weights of another model (wrong shapes) too: loading them would half-overwrite the model.
    other = {k: torch.zeros(v.shape[0] + 1, *v.shape[1:]) for k, v in w5.items()}
    publish(workdir, policy_iter=7, weights=other)
    during += collect_until(conn, 't1', lambda m: 'the model expects' in log_text(workdir))

    # Collection went on with the last good weights all along.
    during += collect_until(conn, 't1', lambda m: len(m) >= 32)
    assert {m['policy_iter'] for m in during} == {5}
    torch.testing.assert_close(comm.collector.policy.state_dict()['model'], w5)
    assert comm.collector.error is None

    w9 = publish(workdir, policy_iter=9)
    last = collect_until(conn, 't1', lambda m: m[-1]['policy_iter'] == 9)
    torch.testing.assert_close(comm.collector.policy.state_dict()['model'], w9)

    # Each env's samples come in time order, so their version never goes back (samples of different envs
    # interleave: a trajectory cut after an update holds transitions of both versions). The version is the
    # one stored in each sample.
    stream = first + later + during + last
    for env_id in (0, 1):
        versions = [m['policy_iter'] for m in stream if m['env_id'] == env_id]
        assert versions == sorted(versions) and versions[0] == 0 and versions[-1] == 9
    reader = SampleReader(os.path.join(workdir, 'data'))
    assert all(reader.read(m['data_id'])['collect_iter'] == m['policy_iter'] for m in last[-8:])
    ok(conn, close_task('t1'))


def test_eval_task_plays_greedy_episodes_and_reports_returns(conn, workdir):
    publish(workdir, policy_iter=12)
    ok(conn, start_task('e1', workdir, eval_flag=True, n_episode=3))
    answer = ok(conn, data_task('e1'))

    info = answer['finish_info']
    assert info['eval_flag'] is True and info['collector_done'] is True and info['task_id'] == 'e1'
    assert info['episode_count'] == 3 and info['policy_iter'] == 12 and info['sample_count'] == 0
    # CartPole pays 1 per step: the returns add up to the env steps played.
    assert 1.0 <= info['reward_min'] <= info['reward_mean'] <= info['reward_max'] <= 200.0
    assert info['reward_std'] >= 0.0
    assert abs(info['reward_mean'] * 3 - info['step_count']) < 1e-6
    assert not os.path.isdir(os.path.join(workdir, 'data')) or not _data_files(workdir)  # no samples written
    ok(conn, close_task('e1'))


def test_eval_episode_count_defaults_to_the_policy_evaluator_config(conn, workdir):
    ok(conn, start_task('e1', workdir, eval_flag=True))
    info = ok(conn, data_task('e1'))['finish_info']
    assert info['episode_count'] == 2  # policy.eval.evaluator.n_episode
    assert info['policy_iter'] == 0  # no policy file: the initial weights were evaluated (and logged)
    assert 'not found' in log_text(workdir)


def test_episode_budget(conn, workdir):
    ok(conn, start_task('t1', workdir, n_sample=None, episode_num=3))
    metadata, finish = run_to_finish(conn, 't1')
    assert finish['episode_count'] >= 3
    assert finish['sample_count'] == len(metadata) > 0


def test_close_then_new_start_task_and_replacing_a_running_task(conn, comm, workdir):
    ok(conn, start_task('t1', workdir))
    first = collect_until(conn, 't1', lambda m: len(m) >= 16)
    closed = ok(conn, close_task('t1'))
    assert closed['finish_info']['stopped'] is True
    assert closed['finish_info']['sample_count'] >= len(first)
    assert wait_until(lambda: not _task_threads())
    assert 'was closed' in failed(conn, data_task('t1'))

    # The process stays resident: the next task starts on the same collector.
    publish(workdir, policy_iter=2)
    ok(conn, start_task('t2', workdir))
    second = collect_until(conn, 't2', lambda m: 2 in {x['policy_iter'] for x in m})
    # t2 goes on with t1's envs: the first samples may finish trajectories whose actions policy 0 chose
    assert {m['task_id'] for m in second} == {'t2'} and {m['policy_iter'] for m in second} <= {0, 2}
    reader = SampleReader(os.path.join(workdir, 'data'))
    assert reader.read(first[0]['data_id'])['obs'].shape == (4,)
    assert "task_id 't1' is not the current collector task 't2'" in failed(conn, data_task('t1'))

    # A start task while one runs (the coordinator lost and found us again) replaces it.
    ok(conn, start_task('t3', workdir, eval_flag=True, n_episode=2))
    assert 'is not the current collector task' in failed(conn, data_task('t2'))
    assert ok(conn, data_task('t3'))['finish_info']['episode_count'] == 2
    assert 'still running: closing it for task t3' in log_text(workdir)
    ok(conn, close_task('t3'))
    assert wait_until(lambda: not _task_threads())


def test_close_interrupts_a_long_evaluation_at_once(conn, workdir):
    ok(conn, start_task('e1', workdir, eval_flag=True, n_episode=10000))
    assert wait_until(lambda: bool(_task_threads()))
    closed = ok(conn, close_task('e1'), timeout=10.0)
    assert closed['finish_info']['stopped'] is True
    assert closed['finish_info']['episode_count'] < 10000
    assert not _task_threads()


def test_bounded_queue_pauses_collection_and_unsent_files_are_removed(make_comm, master, workdir):
    comm = make_comm(queue_size=1)
    conn = master.new_connection('collector0', '127.0.0.1', comm.port)
    conn.connect()
    try:
        ok(conn, start_task('t1', workdir, chunk_size=8))
        sent = ok(conn, data_task('t1'))['data']
        assert sent
        # Nobody asks: the collector fills the one queue slot, writes one more chunk and waits.
        assert wait_until(lambda: comm.collector.sample_count > len(sent))
        count = comm.collector.sample_count
        threading.Event().wait(0.5)
        assert comm.collector.sample_count == count
        ok(conn, close_task('t1'))
        # Files of chunks the coordinator never received are removed; the received ones stay.
        sent_files = {m['data_id'].rpartition('#')[0] for m in sent}
        assert set(_data_files(workdir)) == sent_files
    finally:
        conn.disconnect()


def test_bad_start_tasks_fail_with_the_reason(conn, workdir):
    bad_budget = start_task('t1', workdir, n_sample=None, episode_num=None)
    assert "needs a budget: set the collector config's 'n_sample' or 'episode_num'" in failed(conn, bad_budget)

    bad_env = start_task('t2', workdir)
    bad_env['task_info']['env']['type'] = 'no_such_env'
    assert 'no_such_env' in failed(conn, bad_env)

    no_policy = start_task('t3', workdir)
    del no_policy['task_info']['policy']
    assert "task_info['policy'] must be the policy config" in failed(conn, no_policy)

    no_id = start_task('', workdir)
    assert "needs a non-empty string 'task_id'" in failed(conn, no_id)
    # Nothing was left running: a good task still starts.
    ok(conn, start_task('t4', workdir, n_sample=8))
    _, finish = run_to_finish(conn, 't4')
    assert finish['sample_count'] >= 8


def test_failed_collection_fails_the_data_task(conn, workdir):
    task = start_task('t1', workdir)
    task['task_info']['policy_kwargs'] = {'no_such_kwarg': 1}  # DQN's collect forward rejects it
    ok(conn, task)
    message = failed(conn, data_task('t1'))
    assert 'collector task t1 failed' in message and 'no_such_kwarg' in message
    assert wait_until(lambda: not _task_threads())


def test_unwritable_data_directory_fails_the_data_task_with_the_storage_flag(conn, workdir):
    (workdir / 'data').mkdir(exist_ok=True)
    (workdir / 'data' / 'not_a_dir').write_text('a file where the data directory should be')
    task = start_task('t1', workdir)
    task['task_info']['path_data'] = str(workdir / 'data' / 'not_a_dir')  # inside the worker's path_data
    ok(conn, task)
    result = run_task(conn, data_task('t1')).result
    # the coordinator ends the run on this flag instead of handing the task to another collector
    assert result.get(STORAGE_REFUSAL) is True
    message = result['message']
    assert f'collector task t1: cannot write a sample file in {workdir / "data" / "not_a_dir"} (' in message
    assert 'samples were NOT saved' in message
    assert wait_until(lambda: not _task_threads())


def test_coordinator_disconnecting_stops_the_task(master, comm, workdir):
    conn = master.new_connection('collector0', '127.0.0.1', comm.port)
    conn.connect()
    ok(conn, start_task('t1', workdir))
    collect_until(conn, 't1', lambda m: len(m) >= 8)
    conn.disconnect()
    assert wait_until(lambda: comm.collector.finished)
    assert 'the coordinator disconnected' in log_text(workdir)
    # A coordinator connecting again finds a collector ready for a new task.
    conn = master.new_connection('collector0', '127.0.0.1', comm.port)
    conn.connect()
    try:
        ok(conn, start_task('t2', workdir, n_sample=8))
        _, finish = run_to_finish(conn, 't2')
        assert finish['sample_count'] >= 8
    finally:
        conn.disconnect()


def test_collect_tasks_go_on_with_the_envs_of_the_previous_task(conn, comm, workdir):
    # 8 samples over 2 envs: a few steps per env per task, fewer than a CartPole episode usually lasts. With
    # envs built afresh for each task no episode could be longer than that; kept envs let them run across tasks.
    publish(workdir, policy_iter=1)
    managers, episodes, returns, steps = set(), 0, [], []
    for i in range(12):
        ok(conn, start_task(f't{i}', workdir, n_sample=8, chunk_size=8, eps=1.0))
        managers.add(id(comm.collector.env_manager))
        _, finish = run_to_finish(conn, f't{i}')
        assert finish['sample_count'] >= 8
        steps.append(finish['step_count'])
        episodes += finish['episode_count']
        if finish['episode_count']:
            returns.append(finish['reward_mean'])
        if i == 5:  # an evaluation between collect tasks builds its own envs and leaves the kept ones alone
            ok(conn, start_task('e', workdir, eval_flag=True, n_episode=1))
            ok(conn, data_task('e'))
    assert len(managers) == 1 and comm.kept_resources.holding
    # the longest episode is longer than any task's steps per env: it began in an earlier task
    assert episodes > 0 and max(returns) > max(steps) / 2, (returns, steps)

    # a task with another configuration does not inherit them: the kept envs are closed, new ones built
    kept_manager = comm.kept_resources.take('')  # a key no task has: closes what was kept
    assert kept_manager is None and not comm.kept_resources.holding
    ok(conn, start_task('fresh', workdir, n_sample=8, chunk_size=8, keep_envs=False))
    assert id(comm.collector.env_manager) not in managers
    run_to_finish(conn, 'fresh')
    assert not comm.kept_resources.holding  # keep_envs=False: closed at the end of the task
