"""``comm_batches``: the comm learner asks for several batches per data demand (``num_batches``) and answers
their learn task with one learn info per trained batch, so a run still records one info per iteration."""

import os
import time

import pytest

from ding.worker.learner.comm import FlaskFileSystemLearner
from ding.worker.learner.comm.batch_loader import BatchLoader
from tests.helpers.comm_learner import BATCH, comm_config, failed, ok, serving, start_task, write_sample_file


def _train_batched(conn, task_id, metadata, max_rounds=50):
    """The coordinator's loop for ``num_batches`` demands; returns (demands, learn task answers)."""
    demands, answers = [], []
    for _ in range(max_rounds):
        demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': task_id}})
        demands.append(demand)
        batches = [metadata[: demand['batch_size']] for _ in range(demand['num_batches'])]
        answer = ok(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': task_id}, 'data': batches})
        answers.append(answer)
        if any(i['learner_done'] for i in answer['infos']):
            return demands, answers
    raise AssertionError(f'the learner was not done after {max_rounds} learn tasks')


def test_several_batches_per_demand_one_info_per_iteration(conn, comm, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    ok(conn, start_task('task_k', 10, comm_batches=4))

    demands, answers = _train_batched(conn, 'task_k', metadata)

    # 10 iterations in batches of 4: 4 + 4 + 2 (the last demand asks only for what is left to train).
    assert [d['num_batches'] for d in demands] == [4, 4, 2]
    assert [d['cur_learner_iter'] for d in demands] == [0, 4, 8]
    # A learn task may be answered before its last batches trained (their infos come with the next one),
    # but every iteration has exactly one learn info, in order.
    infos = [i for a in answers for i in a['infos']]
    assert [i['learner_step'] for i in infos] == list(range(10))
    assert [i['policy_iter'] for i in infos] == list(range(1, 11))
    assert [i['learner_done'] for i in infos] == [False] * 9 + [True]
    assert all(a['trained'] and a['task_id'] == 'task_k' for a in answers)
    assert 'has ended (finished)' in failed(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_k'}})
    closed = ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_k'}})
    assert closed['last_iter'] == 10 and closed['learn_infos'] == 10


class SlowDiskLoader(BatchLoader):
    """Reading a batch's sample files takes 0.2 s (a slow shared file system)."""

    def load_batch(self, run, metadata):
        time.sleep(0.2)
        return super().load_batch(run, metadata)

    def load_group(self, run, batches):  # a learn task's batches built at once read their files at once
        time.sleep(0.2)
        return super().load_group(run, batches)


class SlowDiskLearner(FlaskFileSystemLearner):
    """A comm learner on a slow shared file system.

    Then each iteration trains (and its learn info is queued) before the loader, still reading, issues the
    next demand: the order in which the run's last learn info once got lost (issue 4)."""

    batch_loader_cls = SlowDiskLoader


@pytest.fixture(params=['local_disk', 'slow_disk'])
def any_disk_conn(request, master, workdir):
    """A connection to a comm learner reading from a local disk or from a slow shared one."""
    cls = FlaskFileSystemLearner if request.param == 'local_disk' else SlowDiskLearner
    with serving(cls(comm_config(workdir)), master) as connection:
        yield connection


def test_rejected_batch_inside_a_group_adds_no_info(any_disk_conn, workdir):
    conn = any_disk_conn
    good = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    missing = [dict(m, data_id='no_such_file#0') for m in good]
    ok(conn, start_task('task_r', 3, comm_batches=3))

    demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_r'}})
    assert demand['num_batches'] == 3
    first = ok(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_r'}, 'data': [good, missing, good]})
    # One iteration is still to train: the next demand asks for exactly one batch.
    demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_r'}})
    assert demand['num_batches'] == 1 and demand['cur_learner_iter'] == 2
    last = ok(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_r'}, 'data': [good]})
    # Three iterations trained the three good batches; the unreadable one trained nothing and is named in a
    # message; its samples are reported once, with a learn info that follows the rejection.
    infos = first['infos'] + last['infos']
    assert [i['learner_step'] for i in infos] == [0, 1, 2]
    assert [i['learner_done'] for i in infos] == [False, False, True]
    assert 'rejected' in first.get('message', '') + last.get('message', '')
    assert sum(i['unreadable'] for i in infos) == BATCH
    closed = ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_r'}})
    assert closed['last_iter'] == 3 and closed['learn_infos'] == 3


def test_batched_learn_task_needs_a_list_of_batches(conn, comm, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    ok(conn, start_task('task_b', 2, comm_batches=2))
    ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_b'}})
    message = failed(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_b'}, 'data': metadata})
    assert 'num_batches=2' in message and 'list of batches' in message
