"""The learner side of the parallel pipeline: a real FlaskFileSystemLearner driven over HTTP by a real Master
acting as the coordinator, training a real DQN policy on sample files written with ``save_samples``."""

import math
import os
import threading

import pytest
import torch

from ding.policy.dqn import DQNPolicy
from ding.utils.file_transport import load_policy, save_samples, unique_stem
from ding.utils.registry import POLICY_REGISTRY
from ding.worker import create_comm_learner
from ding.worker.learner.comm import FlaskFileSystemLearner
from tests.helpers.comm_learner import BATCH, comm_config, dqn_samples, failed, ok, start_task, train, write_sample_file


def _cycle(metadata):
    """batch_for(demand): consecutive slices of ``metadata``, wrapping around."""
    state = {'k': 0}

    def batch_for(demand):
        k = state['k']
        state['k'] += 1
        start = (k * demand['batch_size']) % len(metadata)
        return metadata[start : start + demand['batch_size']]

    return batch_for


def _learner_threads():
    return [t for t in threading.enumerate() if t.name == 'ding-learner0-learner' and t.is_alive()]


def _learner_thread_ends(timeout=5.0):
    """True when the learner thread ends within ``timeout`` (it returns right after reporting the end)."""
    for t in _learner_threads():
        t.join(timeout)
    return not _learner_threads()


def test_lockstep_training_one_learn_info_per_iteration(conn, comm, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    assert ok(conn, start_task('task_a', 5))['message'] == 'learner task has started'

    demands = []

    def batch_for(demand):
        demands.append(demand)
        return metadata

    infos = train(conn, 'task_a', batch_for)

    # Exactly one learn info per training iteration, in order, the last one saying the run is done.
    assert len(infos) == 5
    assert [i['learner_step'] for i in infos] == [0, 1, 2, 3, 4]
    assert [i['policy_iter'] for i in infos] == [1, 2, 3, 4, 5]
    assert [i['learner_done'] for i in infos] == [False] * 4 + [True]
    assert all(i['trained'] and i['task_id'] == 'task_a' for i in infos)
    assert all(isinstance(i['loss'], float) and math.isfinite(i['loss']) for i in infos)
    # The demand carries the batch size and the iteration the batch will train at.
    assert [d['cur_learner_iter'] for d in demands] == [0, 1, 2, 3, 4]
    assert all(d['batch_size'] == BATCH and d['task_id'] == 'task_a' for d in demands)
    # Priorities come back with the buffer's ids, one per trained sample.
    prio = infos[-1]['priority_info']
    assert prio['replay_unique_id'] == [m['replay_unique_id'] for m in metadata]
    assert len(prio['priority']) == BATCH

    # The learner is done: asking for more data fails, naming why.
    assert 'has ended (finished)' in failed(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_a'}})

    closed = ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_a'}})
    assert closed['message'] == 'learner task has closed' and closed['last_iter'] == 5

    # The published weights are the learner's final ones, tagged with its iteration count.
    state, policy_iter = load_policy(os.path.join(workdir, 'policy', 'policy_learner0.safetensors'))
    assert policy_iter == 5
    model = comm.learner.policy.state_dict()['model']
    assert state.keys() == model.keys()
    assert all(torch.equal(state[k], model[k]) for k in model)


def test_close_then_new_start_task_resident(conn, comm, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), 3 * BATCH)
    ok(conn, start_task('task_1', 1000))
    infos = train(conn, 'task_1', _cycle(metadata), stop_after=2)
    assert len(infos) == 2 and not infos[-1]['learner_done']
    first_learner = comm.learner

    closed = ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_1'}})
    assert closed['last_iter'] == 2
    assert _learner_thread_ends()
    assert 'has ended (closed by learner_close_task) after 2 iterations' in failed(
        conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_1'}}
    )

    # Same process, next task: a fresh learner trains its own iterations.
    ok(conn, start_task('task_2', 3))
    infos = train(conn, 'task_2', _cycle(metadata))
    assert comm.learner is not first_learner
    assert [i['learner_step'] for i in infos] == [0, 1, 2]
    assert infos[-1]['learner_done'] and all(i['task_id'] == 'task_2' for i in infos)


def test_unreadable_samples_are_skipped_and_logged(conn, comm, workdir):
    path_data = os.path.join(workdir, 'data')
    good = write_sample_file(path_data, 2 * BATCH, seed=1)
    bad = write_sample_file(path_data, BATCH, seed=2)
    bad_file = os.path.join(path_data, bad[0]['data_id'].split('#')[0])
    with open(bad_file, 'r+b') as f:  # flip one byte: the sha256 no longer matches
        f.seek(os.path.getsize(bad_file) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    missing = [dict(good[0], data_id='samples_gone.safetensors#0')]

    ok(conn, start_task('task_c', 2))
    get = {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_c'}}

    def learn(data):
        ok(conn, get)
        return ok(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_c'}, 'data': data})

    # Half of the batch is in the corrupt file: the batch shrinks to the readable half.
    info = learn(good[:2] + bad[:2])
    assert info['trained'] and info['unreadable'] == 2
    assert info['priority_info']['replay_unique_id'] == [m['replay_unique_id'] for m in good[:2]]
    # Nothing usable: no iteration, so the answer holds no learn info, and the learner asks again.
    answer = learn(bad[2:] + missing)
    assert answer['trained'] is False and answer['infos'] == [] and 'rejected' in answer['message']
    info = learn(good[BATCH:])
    assert info['trained'] and info['learner_step'] == 1 and info['learner_done']
    assert info['unreadable'] == 3  # the rejected batch's samples are counted with the next learn info

    comm_log = open(os.path.join(workdir, 'exp', 'log', 'comm_learner0', 'comm_learner0_logger.txt')).read()
    assert bad_file in comm_log and 'sha256 mismatch' in comm_log
    assert 'samples_gone.safetensors' in comm_log


def test_stale_samples_dropped_and_policy_lag_reported(conn, comm, workdir):
    path_data = os.path.join(workdir, 'data')
    old = write_sample_file(path_data, 2, policy_iter=0, seed=3)
    ok(conn, start_task('task_s', 4, max_staleness=1))

    def batch_for(demand):
        it = demand['cur_learner_iter']
        fresh = write_sample_file(path_data, 2, policy_iter=it, seed=10 + it)
        return fresh + old

    infos = train(conn, 'task_s', batch_for)
    assert len(infos) == 4
    # Iteration k trains fresh samples (lag 0) and samples of policy 0 (lag k) while k <= max_staleness.
    assert [i['stale_dropped'] for i in infos] == [0, 0, 2, 2]
    assert [i['policy_lag'] for i in infos] == [
        {'min': 0, 'mean': 0.0, 'max': 0},
        {'min': 0, 'mean': 0.5, 'max': 1},
        {'min': 0, 'mean': 0.0, 'max': 0},
        {'min': 0, 'mean': 0.0, 'max': 0},
    ]
    assert [len(i['priority_info']['priority']) for i in infos] == [4, 4, 2, 2]
    # The lag also goes into the learner's log table (and tensorboard) with its other statistics.
    ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_s'}})
    learner_log = open(os.path.join(workdir, 'exp', 'log', 'learner0', 'learner0_logger.txt')).read()
    assert 'policy_lag_mean' in learner_log and 'stale_dropped' in learner_log


def test_unknown_and_out_of_order_tasks_fail(conn, comm, workdir):
    assert 'learner_dance_task' in failed(conn, {'name': 'learner_dance_task', 'task_info': {}})
    assert 'no learner task is running' in failed(
        conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'x'}}
    )
    resource = ok(conn, {'name': 'resource'})
    assert resource['cpu'] >= 1 and resource['gpu'] >= 0

    ok(conn, start_task('task_o', 10))
    learn = {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_o'}, 'data': []}
    assert 'send learner_get_data_task first' in failed(conn, learn)
    assert "'other' is not the running learner task" in failed(
        conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'other'}}
    )
    ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_o'}})
    assert "data[0] must be a dict with a string 'data_id'" in failed(conn, dict(learn, data=[{'id': 1}]))
    # A bad start task fails with the reason and leaves the running task alone.
    bad_start = start_task('task_bad', 1)
    bad_start['task_info']['policy'] = dict(bad_start['task_info']['policy'], type='no_such_policy')
    assert 'cannot create the learner' in failed(conn, bad_start)
    ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_o'}})
    assert _learner_thread_ends()


@pytest.mark.parametrize('where', ['comm_config', 'learner_cfg'])
def test_send_policy_freq(make_comm, master, workdir, where):
    # DI-engine configs put send_policy_freq in policy.learn.learner; the comm learner's config is the default.
    # no minimum interval between writes: every 3rd iteration's weights are written
    comm = make_comm(send_policy_freq=3 if where == 'comm_config' else 1, send_policy_min_interval=0)
    extra = {'send_policy_freq': 3} if where == 'learner_cfg' else {}
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    conn = master.new_connection('learner0', '127.0.0.1', comm.port)
    conn.connect()
    try:
        ok(conn, start_task('task_f', 5, **extra))
        policy_file = os.path.join(workdir, 'policy', 'policy_learner0.safetensors')
        assert load_policy(policy_file)[1] == 0  # published before the first iteration
        train(conn, 'task_f', lambda demand: metadata)
        ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_f'}})
        assert load_policy(policy_file)[1] == 3  # then after every 3rd iteration only
    finally:
        conn.disconnect()


def test_throttled_publishing_skips_snapshots_and_still_publishes_the_last_weights(make_comm, master, workdir):
    comm = make_comm(send_policy_freq=1, send_policy_min_interval=60)
    submitted = []
    send_policy = comm.send_policy
    comm.send_policy = lambda state: (submitted.append(state['iter']), send_policy(state))[1]
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    conn = master.new_connection('learner0', '127.0.0.1', comm.port)
    conn.connect()
    try:
        ok(conn, start_task('task_t', 5))
        train(conn, 'task_t', lambda demand: metadata)
        ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_t'}})
        # before the first iteration, then nothing within the 60 s interval, then the run's last weights
        assert submitted == [0, 5]
        assert load_policy(os.path.join(workdir, 'policy', 'policy_learner0.safetensors'))[1] == 5
    finally:
        conn.disconnect()


def test_close_while_waiting_stops_everything(make_comm, master, workdir):
    comm = make_comm()
    conn = master.new_connection('learner0', '127.0.0.1', comm.port)
    conn.connect()
    try:
        ok(conn, start_task('task_w', 100))
        ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_w'}})
        assert _learner_threads()
    finally:
        comm.close()  # the learner waits for data: closing must not hang
        conn.disconnect()
    assert _learner_thread_ends()
    assert not comm.slave.is_running


def test_create_comm_learner_from_worker_config(workdir):
    comm = create_comm_learner(comm_config(workdir))
    assert isinstance(comm, FlaskFileSystemLearner)
    try:
        comm.start()
        assert comm.port > 0 and comm.slave.ping()
    finally:
        comm.close()
    with pytest.raises(KeyError, match='no_such_comm'):
        create_comm_learner(comm_config(workdir, type='no_such_comm'))
    with pytest.raises(ValueError, match='use_distributed'):
        create_comm_learner(comm_config(workdir, use_distributed=True))


def test_learner_failure_fails_the_learn_task_and_next_start_works(conn, comm, workdir):
    from ding.utils.file_transport import save_samples

    path_data = os.path.join(workdir, 'data')
    good = write_sample_file(path_data, BATCH)
    # Readable samples the model cannot take (5 features instead of 4): the policy's forward raises.
    wrong = [dict(s, obs=torch.zeros(5), next_obs=torch.zeros(5)) for s in dqn_samples(BATCH, 0)]
    wrong_meta = [dict(good[0], data_id=d) for d in save_samples(path_data, 'wrong_shape', wrong)]

    ok(conn, start_task('task_e', 10))
    ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_e'}})
    message = failed(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_e'}, 'data': wrong_meta})
    assert 'learner task task_e has ended (failed: RuntimeError' in message
    assert _learner_thread_ends()

    # The coordinator moves the task: a new start task (resuming from the published weights) trains.
    start = start_task('task_e', 3)
    start['task_info']['resume'] = {'policy_name': 'policy_learner0', 'last_iter': 0}
    ok(conn, start)
    infos = train(conn, 'task_e', lambda demand: good)
    assert len(infos) == 3 and infos[-1]['learner_done']


def test_resume_continues_from_published_policy(conn, comm, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    ok(conn, start_task('task_r', 3))
    train(conn, 'task_r', lambda demand: metadata)
    ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_r'}})
    weights, _ = load_policy(os.path.join(workdir, 'policy', 'policy_learner0.safetensors'))

    # Moved after iteration 3 of 5: the new learner starts from those weights and trains the 2 left.
    start = start_task('task_r', 5)
    start['task_info']['resume'] = {'policy_name': 'policy_learner0', 'last_iter': 3}
    assert ok(conn, start)['start_iter'] == 3
    first_demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_r'}})
    assert first_demand['cur_learner_iter'] == 3
    model = comm.learner.policy.state_dict()['model']
    assert all(torch.equal(weights[k], model[k]) for k in model)
    infos = [ok(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_r'}, 'data': metadata})]
    infos += train(conn, 'task_r', lambda demand: metadata)
    assert [i['learner_step'] for i in infos] == [3, 4] and infos[-1]['learner_done']


class TwoUpdateDQN(DQNPolicy):
    """A policy reporting two updates per forward (as PPO-style policies do): a list of two log dicts."""

    def _forward_learn(self, data):
        return [super()._forward_learn(data), super()._forward_learn(data)]


POLICY_REGISTRY.register('dqn_two_updates_test', TwoUpdateDQN)


def test_one_learn_info_per_batch_when_policy_reports_several_updates(conn, comm, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    start = start_task('task_l', 3)
    start['task_info']['policy'] = dict(start['task_info']['policy'], type='dqn_two_updates_test')
    ok(conn, start)
    infos = train(conn, 'task_l', lambda demand: metadata)
    # Three batches, six updates: one learn info per batch, numbered by the learner's iterations.
    assert len(infos) == 3
    assert [i['learner_step'] for i in infos] == [0, 2, 4]
    assert [i['learner_done'] for i in infos] == [False, False, True]
    closed = ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_l'}})
    assert closed['last_iter'] == 6


def test_port_in_use_raises_and_leaks_nothing(make_comm, workdir):
    first = make_comm()
    threads_before = set(threading.enumerate())
    second = FlaskFileSystemLearner(comm_config(workdir, port=first.port))
    with pytest.raises(OSError):
        second.start()
    second.close()
    assert not [t for t in set(threading.enumerate()) - threads_before if t.is_alive()]


def test_coordinator_disconnect_stops_the_task_and_a_new_one_can_start(make_comm, master, workdir):
    comm = make_comm()
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    conn = master.new_connection('learner0', '127.0.0.1', comm.port)
    conn.connect()
    ok(conn, start_task('task_d', 100))
    train(conn, 'task_d', lambda demand: metadata, stop_after=1)
    conn.disconnect()  # the coordinator gave the worker up: its task is failed and moved elsewhere
    assert _learner_thread_ends()
    conn = master.new_connection('learner0', '127.0.0.1', comm.port)
    conn.connect()
    try:
        assert 'left' in failed(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_d'}})
        ok(conn, start_task('task_d2', 2))
        assert len(train(conn, 'task_d2', lambda demand: metadata)) == 2
    finally:
        conn.disconnect()


def test_batches_across_files_train_with_the_buffers_ids(conn, comm, workdir):
    # Two files written alike: the comm learner collates the batch from their columns. A file with another
    # key besides: that batch goes to the policy as a list of samples. Both train, and the priorities come
    # back with the ids of the samples they belong to (grouped by file, as the samples were read).
    data = os.path.join(workdir, 'data')
    first, second = write_sample_file(data, 2, seed=1), write_sample_file(data, 2, seed=2)
    odd_ids = save_samples(data, unique_stem('odd'), [dict(s, extra=torch.ones(3)) for s in dqn_samples(2, 3)])
    odd = [dict(first[i], data_id=d, replay_unique_id=f'odd-{i}') for i, d in enumerate(odd_ids)]
    batches = [[first[0], second[0], first[1], second[1]], [first[0], odd[0], second[1], odd[1]]]
    ok(conn, start_task('task_m', 2))
    infos = train(conn, 'task_m', lambda demand: batches.pop(0))
    assert [i['trained'] for i in infos] == [True, True]
    assert all(math.isfinite(i['loss']) for i in infos)
    ids = [i['priority_info']['replay_unique_id'] for i in infos]
    assert ids == [
        [
            first[0]['replay_unique_id'],
            first[1]['replay_unique_id'],
            second[0]['replay_unique_id'],
            second[1]['replay_unique_id'],
        ],
        [first[0]['replay_unique_id'], 'odd-0', 'odd-1', second[1]['replay_unique_id']],
    ]
    assert [len(i['priority_info']['priority']) for i in infos] == [4, 4]
    assert infos[0]['priority_info']['replay_buffer_idx'] == [0, 1, 0, 1]


def test_policy_writes_wait_for_send_policy_min_interval(make_comm, master, workdir):
    # Weights every iteration, but at most one policy file per 30 s: the run's first weights go out at once,
    # the later ones wait (the newest replacing older ones) and the run's end writes the last.
    comm = make_comm(send_policy_freq=1, send_policy_min_interval=30.0)
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    policy_file = os.path.join(workdir, 'policy', 'policy_learner0.safetensors')
    conn = master.new_connection('learner0', '127.0.0.1', comm.port)
    conn.connect()
    try:
        ok(conn, start_task('task_w', 10))
        assert load_policy(policy_file)[1] == 0
        infos = train(conn, 'task_w', lambda demand: metadata, stop_after=3)
        assert infos[-1]['policy_iter'] == 3 and load_policy(policy_file)[1] == 0
        closed = ok(conn, {'name': 'learner_close_task', 'task_info': {'task_id': 'task_w'}})
        assert load_policy(policy_file)[1] == closed['last_iter'] >= 3
    finally:
        conn.disconnect()
    with pytest.raises(ValueError, match='send_policy_min_interval'):
        FlaskFileSystemLearner(comm_config(workdir, send_policy_min_interval=-1))
