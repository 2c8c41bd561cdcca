"""A learn task of several batches (``comm_batches``) is built in one go when it arrives: the batches the learner
trains on are the ones it would build one at a time, and where a batch needs looking at on its own (a missing
file, a staleness bound, lists of dicts) the task's batches are built one by one as before."""

import os

import torch

from ding.worker.coordinator.learn_task_payload import learn_task_payload
from ding.worker.learner.comm import FlaskFileSystemLearner
from ding.worker.learner.comm.batch_loader import BatchLoader
from ding.worker.learner.comm.learn_task_data import (
    DataIdRows,
    data_id_bound,
    group_rows,
    grouped_order,
    split_batch,
    split_data_ids,
)
from tests.helpers.comm_learner import BATCH, comm_config, ok, serving, start_task, write_sample_file


class GroupRecordingLoader(BatchLoader):
    """Records each learn task built in one go, next to what building each of its batches on its own gives;
    and how many batches were built one at a time."""

    def __init__(self, pool, logger):
        super().__init__(pool, logger)
        self.groups, self.one_at_a_time = [], 0

    def load_group(self, run, batches):
        built = super().load_group(run, batches)
        if built is not batches:
            self.groups.append(([b.loaded for b in built], [BatchLoader.load_batch(self, run, b) for b in batches]))
        return built

    def load_batch(self, run, metadata):
        self.one_at_a_time += 1
        return super().load_batch(run, metadata)


class GroupRecordingLearner(FlaskFileSystemLearner):
    """The comm learner with a ``GroupRecordingLoader`` (``comm.groups``, ``comm.one_at_a_time``)."""

    batch_loader_cls = GroupRecordingLoader

    @property
    def groups(self):
        return self.batch_loader.groups

    @property
    def one_at_a_time(self):
        return self.batch_loader.one_at_a_time


def _same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def _run(master, workdir, batches_of_task, **learner):
    """Train on learn tasks of ``batches_of_task(demand)`` (lists of metadata lists, sent as columns)."""
    comm = GroupRecordingLearner(comm_config(workdir))
    with serving(comm, master) as conn:
        ok(conn, start_task('task_g', 6, comm_batches=3, **learner))
        infos = []
        while not (infos and infos[-1]['learner_done']):
            demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': 'task_g'}})
            batches = batches_of_task(demand)
            answer = ok(
                conn,
                {
                    'name': 'learner_learn_task',
                    'task_info': {'task_id': 'task_g'},
                    'data': learn_task_payload(demand, batches),
                },
            )
            infos.extend(answer['infos'])
    return comm, infos


def test_a_learn_task_is_built_at_once_into_the_batches_built_one_by_one(master, workdir):
    data = os.path.join(workdir, 'data')
    a, b, c = (write_sample_file(data, 4, policy_iter=k, seed=k) for k in range(3))
    for k, meta in enumerate(a + b + c):
        meta['IS'] = 0.25 * k  # a prioritized buffer's weights: a float column

    def batches_of_task(demand):
        return [[a[0], b[1], a[2], c[3]], [c[0], c[1], b[0], a[1]], [b[2], a[3], b[3], a[0]]][: demand['num_batches']]

    comm, infos = _run(master, workdir, batches_of_task)

    assert len(infos) == 6 and infos[-1]['learner_done']
    assert len(comm.groups) == 2 and comm.one_at_a_time == 0
    for at_once, one_by_one in comm.groups:
        assert len(at_once) == 3
        for (batch, versions, stale, unreadable), (alone, alone_versions, *counts) in zip(at_once, one_by_one):
            _same(batch, alone)
            assert versions == alone_versions and (stale, unreadable) == tuple(counts) == (0, 0)
    first = comm.groups[0][0][0][0]
    # Grouped by file within the batch (a, a, b, c), as one batch alone is.
    assert first['replay_unique_id'] == [m['replay_unique_id'] for m in (a[0], a[2], b[1], c[3])]
    assert first['policy_iter'].tolist() == [0, 0, 1, 2] and first['IS'].dtype == torch.float32
    # Each iteration trained its own batch, in order: lag = iteration - the samples' policy versions.
    assert [(i['policy_lag']['min'], i['policy_lag']['max']) for i in infos] == [
        (-2, 0),
        (-1, 1),
        (1, 2),
        (1, 3),
        (2, 4),
        (4, 5),
    ]


def test_a_task_with_a_missing_file_is_built_batch_by_batch(master, workdir):
    good = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    missing = [dict(m, data_id='no_such_file#0') for m in good]
    comm, infos = _run(master, workdir, lambda demand: [good, missing, good][: demand['num_batches']])
    assert comm.groups == []  # each task of two or more batches has the missing file; one batch is not grouped
    assert comm.one_at_a_time >= 4
    # The missing file's samples are counted as unreadable, on the learn info after each rejected batch.
    assert len(infos) == 6 and sum(i['unreadable'] for i in infos) >= BATCH
    assert all(i['unreadable'] % BATCH == 0 for i in infos)


def test_with_a_staleness_bound_each_batch_is_judged_when_handed_over(master, workdir):
    metadata = write_sample_file(os.path.join(workdir, 'data'), BATCH)
    comm, infos = _run(master, workdir, lambda demand: [metadata] * demand['num_batches'], max_staleness=100)
    assert comm.groups == [] and comm.one_at_a_time == 6 and len(infos) == 6


def test_group_rows_orders_each_batch_by_file_like_one_batch_alone():
    batches = [
        {'data_id': ['f#0', 'g#1', 'f#2', 'h#3']},
        {'data_id': ['h#0', 'h#1', 'g#0', 'f#1']},
        {'data_id': ['g#2', 'f#3']},
    ]
    files, which, indices, sizes, order = group_rows(batches, DataIdRows())
    assert sizes == [4, 4, 2] and sorted(files) == ['f', 'g', 'h']
    expected, offset = [], 0
    for batch in batches:  # what grouped_order gives each batch on its own
        own_names, _, own_files = split_data_ids(batch['data_id'])
        own = grouped_order(own_names, own_files) or list(range(len(own_names)))
        expected += [offset + p for p in own]
        offset += len(own_names)
    assert order == expected == [0, 2, 1, 3, 4, 5, 6, 7, 8, 9]
    assert [files[w] for w in which] == ['f', 'f', 'g', 'h', 'h', 'h', 'g', 'f', 'g', 'f']
    assert indices.tolist() == [0, 2, 1, 3, 0, 1, 0, 1, 2, 3]
    assert group_rows([{'data_id': ['f#0']}, [{'data_id': 'f#1'}]], DataIdRows()) is None  # a list of dicts
    assert group_rows([{'data_id': ['f#0']}, {'data_id': ['../f#1']}], DataIdRows()) is None  # a malformed id
    assert group_rows([{'data_id': ['f#0']}, {'data_id': []}], DataIdRows()) is None


def test_data_ids_are_parsed_once_and_the_table_starts_afresh_when_full():
    ids = DataIdRows(max_ids=4)
    files, indices = ids.rows(['a#1', 'b#2', 'a#1', 'a#3'])
    assert [ids.files[f] for f in files] == ['a', 'b', 'a', 'a'] and indices.tolist() == [1, 2, 1, 3]
    assert ids.rows(['x#1', '.hidden#0']) is None  # malformed: nothing of it is kept
    files, indices = ids.rows(['b#2', 'c#0'])  # one new id: 4 in all
    assert [ids.files[f] for f in files] == ['b', 'c'] and ids.files == ['a', 'b', 'c']
    files, indices = ids.rows(['a#1', 'd#5'])  # a fifth id: the table starts afresh with these two
    assert [ids.files[f] for f in files] == ['a', 'd'] and indices.tolist() == [1, 5] and ids.files == ['a', 'd']


def test_the_id_table_holds_a_few_times_the_replay_buffer():
    assert data_id_bound({'other': {'replay_buffer': {'replay_buffer_size': 20000}}}) == 80000
    assert data_id_bound({'other': {'replay_buffer': {}}}) == data_id_bound({}) == 1 << 17


def test_split_batch_cuts_tensors_into_views_and_lists_into_slices():
    obs = torch.arange(10.0).reshape(5, 2)
    parts = split_batch({'obs': obs, 'uid': list('abcde')}, [2, 3])
    assert [p['uid'] for p in parts] == [['a', 'b'], ['c', 'd', 'e']]
    assert torch.equal(parts[1]['obs'], obs[2:]) and parts[1]['obs'].data_ptr() == obs[2:].data_ptr()
