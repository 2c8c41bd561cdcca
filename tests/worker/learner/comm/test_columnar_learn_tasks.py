"""Learn tasks whose batches are dicts of metadata columns (the demand's ``'layout': 'columns'`` opt-in):
the real comm learner over HTTP builds the same batches from columns as from lists of dicts, keeps dropping
stale samples and counting unreadable ones, and refuses malformed columns; the real coordinator sends columns
only to a learner that asks for them."""

import os
import time

import pytest
import torch

from ding.config.parallel import compile_config_parallel
from ding.utils.file_transport import save_samples, unique_stem
from ding.utils.jsonable import to_jsonable
from ding.worker.coordinator.coordinator import Coordinator
from ding.worker.coordinator.learn_task_payload import learn_task_payload
from ding.worker.learner.comm import FlaskFileSystemLearner
from ding.worker.learner.comm.batch_loader import BatchLoader
from ding.worker.learner.comm.learn_task_data import METADATA_FIELDS
from tests.helpers.comm_learner import (
    BATCH,
    comm_config,
    dqn_samples,
    failed,
    ok,
    serving,
    start_task,
    train,
    write_sample_file,
)
from tests.helpers.toy_workers import ToyCollectorSlave, ToyLearnerSlave, toy_config


class RecordingLoader(BatchLoader):
    """Keeps every batch it built (what the policy trains on)."""

    def __init__(self, pool, logger):
        super().__init__(pool, logger)
        self.batches = []

    def load_batch(self, run, metadata):
        loaded = super().load_batch(run, metadata)
        self.batches.append(loaded[0])
        return loaded


class RecordingLearner(FlaskFileSystemLearner):
    """The comm learner, keeping every batch it built."""

    batch_loader_cls = RecordingLoader

    @property
    def batches(self):
        return self.batch_loader.batches


@pytest.fixture
def recording(master, workdir):
    """(comm learner that records its batches, the coordinator's connection to it)."""
    comm = RecordingLearner(comm_config(workdir))
    with serving(comm, master) as connection:
        yield comm, connection


def _as_coordinator_sends(batch_for):
    """batch_for(demand) for ``train``, the batch encoded as the coordinator encodes it for that demand."""
    return lambda demand: learn_task_payload(demand, [batch_for(demand)])


def _same_batch(a, b):
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            _same_batch(x, y)
        return
    assert isinstance(b, dict) and a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def test_demand_names_the_fields_it_reads_and_asks_for_columns(conn, comm, workdir):
    ok(conn, start_task('task_d', 2))
    demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_d'}})
    assert demand['layout'] == 'columns'
    assert demand['fields'] == list(METADATA_FIELDS)
    assert {'data_id', 'policy_iter', 'collect_iter', 'replay_unique_id', 'replay_buffer_idx', 'IS', 'priority'} == set(
        demand['fields']
    )


def test_a_policy_without_prioritized_replay_asks_for_fewer_fields(conn, comm, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH, policy_iter=0)
    task = start_task('task_u', 2)
    task['task_info']['policy'].update(priority=False, priority_IS_weight=False)
    ok(conn, task)
    demands = []

    def batch_for(demand):
        demands.append(demand)
        return learn_task_payload(demand, [metadata])

    infos = train(conn, 'task_u', batch_for)
    assert [d['fields'] for d in demands] == [['data_id', 'policy_iter', 'collect_iter']] * 2
    assert 'replay_unique_id' not in learn_task_payload(demands[0], [metadata])
    assert [i['policy_lag']['max'] for i in infos] == [0, 1] and all(i['priority_info'] is None for i in infos)


def test_columns_give_the_batches_that_lists_of_dicts_give(recording, workdir):
    comm, conn = recording
    data = os.path.join(workdir, 'data')
    first, second = write_sample_file(data, 3, seed=1), write_sample_file(data, 3, seed=2)
    for k, meta in enumerate(first + second):
        meta['IS'] = 0.5 + k  # a prioritized buffer's weight: a float column
    odd_ids = save_samples(data, unique_stem('odd'), [dict(s, extra=torch.ones(3)) for s in dqn_samples(2, 3)])
    odd = [dict(first[i], data_id=d, replay_unique_id=f'odd-{i}') for i, d in enumerate(odd_ids)]
    partly = [dict(m) for m in second[:BATCH]]
    del partly[2]['policy_iter']  # a field some samples lack: None in its column
    batches = [
        [first[0], second[0], first[1], second[1]],  # two files, interleaved: grouped by file
        [second[2], second[0], first[2], first[0]],  # two files, one after the other: stays as it is
        [first[0], odd[0], second[1], odd[1]],  # a file that does not collate with the others: sample dicts
        partly,  # a sample lacks policy_iter: no column for it, the samples go one by one, each with its own
    ]
    ok(conn, start_task('task_c', 2 * len(batches)))
    queue = [b for b in batches for _ in range(2)]  # each batch twice: as columns, then as a list of dicts
    sent = []

    def batch_for(demand):
        batch = queue.pop(0)
        payload = learn_task_payload(demand, [batch]) if len(queue) % 2 else to_jsonable(batch)
        sent.append(payload)
        return payload

    infos = train(conn, 'task_c', batch_for)
    assert [type(p) for p in sent] == [dict, list] * len(batches)
    assert sent[0]['data_id'] == [m['data_id'] for m in batches[0]] and 'env_id' not in sent[0]
    assert sent[6]['policy_iter'] == [0, 0, None]
    assert len(comm.batches) == len(infos) == 2 * len(batches)
    for from_columns, from_dicts in zip(comm.batches[0::2], comm.batches[1::2]):
        _same_batch(from_columns, from_dicts)
    for from_columns, from_dicts in zip(infos[0::2], infos[1::2]):  # (the priorities are the next weights')
        for key in ('replay_unique_id', 'replay_buffer_idx'):
            assert from_columns['priority_info'][key] == from_dicts['priority_info'][key]
        # The same samples, trained one iteration later.
        assert {k: v + 1 for k, v in from_columns['policy_lag'].items()} == from_dicts['policy_lag']

    collated, in_order, per_sample, partial = comm.batches[0::2]
    assert collated['replay_unique_id'] == [m['replay_unique_id'] for m in (first[0], first[1], second[0], second[1])]
    assert collated['replay_buffer_idx'].tolist() == [0, 1, 0, 1] and collated['replay_buffer_idx'].dtype == torch.int64
    assert collated['IS'].dtype == torch.float32 and collated['IS'].tolist() == [0.5, 1.5, 3.5, 4.5]
    assert collated['policy_iter'].dtype == torch.int64 and collated['priority'].dtype == torch.float32
    assert in_order['replay_unique_id'] == [m['replay_unique_id'] for m in batches[1]]
    assert isinstance(per_sample, list) and [s['replay_unique_id'] for s in per_sample] == [
        first[0]['replay_unique_id'],
        'odd-0',
        'odd-1',
        second[1]['replay_unique_id'],
    ]
    assert isinstance(partial, list) and [s.get('policy_iter') for s in partial] == [0, 0, None]
    assert [s['IS'] for s in partial] == [m['IS'] for m in partly]


def test_stale_samples_dropped_with_columns(conn, comm, workdir):
    path_data = os.path.join(workdir, 'data')
    old = write_sample_file(path_data, 2, policy_iter=0, seed=3)
    for meta in old:  # a sample without policy_iter: its collect_iter says how old it is
        del meta['policy_iter']
    ok(conn, start_task('task_s', 4, max_staleness=1))

    def batch_for(demand):
        it = demand['cur_learner_iter']
        return write_sample_file(path_data, 2, policy_iter=it, seed=10 + it) + old

    infos = train(conn, 'task_s', _as_coordinator_sends(batch_for))
    assert [i['stale_dropped'] for i in infos] == [0, 0, 2, 2]
    assert [i['policy_lag'] for i in infos] == [
        {'min': 0, 'mean': 0.0, 'max': 0},
        {'min': 0, 'mean': 0.0, 'max': 0},
        {'min': 0, 'mean': 0.0, 'max': 0},
        {'min': 0, 'mean': 0.0, 'max': 0},
    ]
    assert [len(i['priority_info']['priority']) for i in infos] == [4, 4, 2, 2]


def test_unreadable_files_skipped_and_counted_with_columns(conn, comm, workdir):
    path_data = os.path.join(workdir, 'data')
    good = write_sample_file(path_data, 2 * BATCH, seed=1)
    bad = write_sample_file(path_data, BATCH, seed=2)
    bad_name = bad[0]['data_id'].split('#')[0]
    with open(os.path.join(path_data, bad_name), 'r+b') as f:  # flip one byte: the sha256 no longer matches
        f.seek(os.path.getsize(f.name) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    missing = dict(good[0], data_id='samples_gone.safetensors#0')
    malformed = dict(good[0], data_id='../outside#0')
    beyond = dict(good[0], data_id=good[0]['data_id'].split('#')[0] + '#99')
    ok(conn, start_task('task_u', 3))

    def learn(batch):
        demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_u'}})
        return ok(
            conn,
            {
                'name': 'learner_learn_task',
                'task_info': {'task_id': 'task_u'},
                'data': learn_task_payload(demand, [batch]),
            },
        )

    info = learn(good[:2] + bad[:2])
    assert info['trained'] and info['unreadable'] == 2
    assert info['priority_info']['replay_unique_id'] == [m['replay_unique_id'] for m in good[:2]]
    assert bad_name in comm._run.bad_files
    # Every file cached and readable, but one index beyond its file: that sample alone is skipped.
    info = learn(good[2:4] + [beyond])
    assert info['trained'] and info['unreadable'] == 1 and len(info['priority_info']['priority']) == 2
    answer = learn(bad[2:] + [missing, malformed])
    assert answer['trained'] is False and answer['infos'] == [] and 'rejected' in answer['message']
    info = learn(good[BATCH:])
    assert info['trained'] and info['learner_done'] and info['unreadable'] == 4  # the rejected batch's

    log = open(os.path.join(workdir, 'exp', 'log', 'comm_learner0', 'comm_learner0_logger.txt')).read()
    logged = [line for line in log.splitlines() if 'of unreadable file ' + os.path.join(path_data, bad_name) in line]
    assert len(logged) == 1 and 'sha256 mismatch' in logged[0]  # once, although its samples came twice
    assert 'samples_gone.safetensors' in log and "malformed data_id '../outside#0'" in log
    assert 'is beyond the samples of its file' in log


def test_malformed_columns_fail_the_learn_task(conn, comm, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    ok(conn, start_task('task_m', 1))
    ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_m'}})
    columns = learn_task_payload({'layout': 'columns', 'fields': list(METADATA_FIELDS)}, [metadata])

    def refused(data):
        return failed(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_m'}, 'data': data})

    assert "column 'priority' must be a list of 4 values (one per data_id), got 3 values" in refused(
        dict(columns, priority=columns['priority'][:3])
    )
    assert "column 'IS' must be a list of 4 values (one per data_id), got a float" in refused(dict(columns, IS=1.0))
    assert 'every data_id must be a string, got 7' in refused(dict(columns, data_id=columns['data_id'][:3] + [7]))
    assert "'data' must have a 'data_id' column (a list of strings), got NoneType" in refused(
        {k: v for k, v in columns.items() if k != 'data_id'}
    )
    assert "column 'policy_iter' may hold numbers, strings, booleans and None only, got [1]" in refused(
        dict(columns, policy_iter=[[1]] * BATCH)
    )
    assert "'data' must be a list of sample metadata or a dict of metadata columns, got str" in refused('x')
    # Nothing was handed over: the demand is still open, and a good learn task trains.
    info = ok(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_m'}, 'data': columns})
    assert info['trained'] and info['learner_done']


def test_malformed_batches_of_a_num_batches_demand_fail(conn, comm, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    ok(conn, start_task('task_n', 2, comm_batches=2))
    demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_n'}})
    columns = learn_task_payload(demand, [metadata, metadata])
    learn = {'name': 'learner_learn_task', 'task_info': {'task_id': 'task_n'}}
    assert "so 'data' must be a list of batches" in failed(conn, dict(learn, data=columns[0]))
    assert "data[1]: column 'policy_iter' must be a list of 2 values (one per data_id), got 4 values" in failed(
        conn, dict(learn, data=[columns[0], dict(columns[1], data_id=columns[1]['data_id'][:2])])
    )
    answer = ok(conn, dict(learn, data=columns))
    assert answer['trained'] and len(answer['infos']) == 2


def test_payload_for_a_demand_without_the_opt_in_is_lists_of_dicts():
    import numpy as np

    batch = [
        {'data_id': 'f#0', 'policy_iter': np.int64(3), 'IS': np.float32(0.5), 'task_id': 'c'},
        {'data_id': 'f#1', 'policy_iter': 4, 'task_id': 'c'},
    ]
    plain = [
        {'data_id': 'f#0', 'policy_iter': 3, 'IS': 0.5, 'task_id': 'c'},
        {'data_id': 'f#1', 'policy_iter': 4, 'task_id': 'c'},
    ]
    assert learn_task_payload({'batch_size': 2}, [batch]) == plain
    assert learn_task_payload({'batch_size': 2, 'num_batches': 2}, [batch, batch]) == [plain, plain]
    # An unknown layout, or fields that are no list of names: the layout every learner understands.
    assert learn_task_payload({'layout': 'rows', 'fields': ['data_id']}, [batch]) == plain
    assert learn_task_payload({'layout': 'columns', 'fields': 'data_id'}, [batch]) == plain
    # Opted in: the requested fields only; None where a sample lacks one; none left out where none has it.
    columns = learn_task_payload(
        {'layout': 'columns', 'fields': ['data_id', 'IS', 'policy_iter', 'priority'], 'num_batches': 1}, [batch]
    )
    assert columns == [{'data_id': ['f#0', 'f#1'], 'IS': [0.5, None], 'policy_iter': [3, 4]}]
    assert [type(v) for v in columns[0]['policy_iter']] == [int, int]


# ---- the real coordinator with toy learners (real HTTP slaves) ---------------------------------------------
class ColumnsToyLearner(ToyLearnerSlave):
    """The toy learner, opting in to columns of the fields it reads (and reading them back as dicts)."""

    FIELDS = ['data_id', 'collect_iter']

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.received = []

    def _process_task(self, task):
        if task.get('name') == 'learner_get_data_task':
            return dict(super()._process_task(task), fields=self.FIELDS, layout='columns')
        if task.get('name') == 'learner_learn_task':
            self.received.append(task['data'])
            if isinstance(task['data'], dict):
                task = dict(task, data=[dict(zip(task['data'], values)) for values in zip(*task['data'].values())])
        return super()._process_task(task)


class ListsToyLearner(ColumnsToyLearner):
    """The same, with a demand that does not opt in (what a DI-engine learner sends)."""

    def _process_task(self, task):
        if task.get('name') == 'learner_get_data_task':
            return ToyLearnerSlave._process_task(self, task)
        return super()._process_task(task)


@pytest.mark.parametrize('learner_cls', [ColumnsToyLearner, ListsToyLearner])
def test_coordinator_sends_columns_only_when_the_demand_asks(tmp_path, monkeypatch, learner_cls):
    monkeypatch.chdir(tmp_path)
    cfg = compile_config_parallel(*toy_config('toy', collector_num=1, stop_value=4, batch_size=4), seed=0)
    learner, collector = learner_cls(), ToyCollectorSlave()
    slaves = [learner, collector]
    coordinator = None
    try:
        for kind, slave in (('learner', learner), ('collector', collector)):
            slave.start()
            cfg.system.coordinator[kind][f'{kind}0'] = [f'{kind}0', '127.0.0.1', slave.port]
            cfg.system[kind][f'{kind}0'].port = slave.port
        coordinator = Coordinator(cfg)
        coordinator.start()
        deadline = time.time() + 30
        while not coordinator.system_shutdown_flag and time.time() < deadline:
            time.sleep(0.05)
    finally:
        if coordinator is not None:
            coordinator.close()
        for slave in slaves:
            slave.close()
    assert coordinator.summary()['solved'] and learner.received and learner.bad_samples == 0
    if learner_cls is ColumnsToyLearner:
        assert all(isinstance(data, dict) and list(data) == ColumnsToyLearner.FIELDS for data in learner.received)
        assert all(len(data['data_id']) == 4 == len(data['collect_iter']) for data in learner.received)
    else:
        assert all(isinstance(data, list) and len(data) == 4 for data in learner.received)
        assert all(
            isinstance(meta, dict) and {'data_id', 'collect_iter', 'task_id'} <= meta.keys()
            for data in learner.received
            for meta in data
        )
