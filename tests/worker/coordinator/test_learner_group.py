"""LearnerGroup: the rounds in which the coordinator serves data to the ranks of a data-parallel learner group,
on real replay buffers, with one thread per rank as the coordinator runs them."""

import threading

from easydict import EasyDict

from ding.worker.coordinator.learner_group import GroupData, LearnerGroup, bin_buffer_id, collector_bin
from ding.worker.replay_buffer import create_buffer

BATCH = 16


class Buffers:
    """Real replay buffers by id, and whether the collection is over: what the data plane gives a group."""

    def __init__(self, ids, max_use=float('inf')):
        self.buffers = {}
        for buffer_id in ids:
            cfg = EasyDict(type='advanced', replay_buffer_size=10000, priority=False, max_use=max_use)
            self.buffers[buffer_id] = create_buffer(cfg, exp_name='test_learner_group', instance_name=buffer_id)
        self.over = False
        self.pushed = 0

    def push(self, buffer_id, n):
        self.buffers[buffer_id].push([{'data_id': f'{buffer_id}#{self.pushed + i}'} for i in range(n)])
        self.pushed += n

    def data(self):
        return GroupData(
            sample=lambda b, size, it: self.buffers[b].sample(size, it),
            count=lambda b: self.buffers[b].count(),
            wait_for_data=lambda timeout: threading.Event().wait(min(timeout, 0.01)),
            collection_over=lambda: self.over,
        )


def serve_ranks(group, rounds=None):
    """Both ranks ask for data round after round (as their task threads do) until no round follows or ``rounds``
    were served; returns the batches each rank received."""
    received = [[], []]

    def rank_loop(rank):
        while rounds is None or len(received[rank]) < rounds:
            batches = group.serve(rank, {'batch_size': BATCH, 'cur_learner_iter': 0}, alive=lambda: True)
            if batches is None:
                return
            group.accepted(rank, len(batches))
            received[rank].extend(batches)

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    return received


def test_random_replay_counts_samples_two_ranks_train_in_one_round():
    buffers = Buffers(['buf'])
    buffers.push('buf', 64)
    group = LearnerGroup('buf', 2, buffers.data(), assignment='random')
    received = serve_ranks(group, rounds=50)
    assert [len(r) for r in received] == [50, 50]
    stats = group.stats()
    assert stats['rounds'] == 50 and stats['served_samples'] == 50 * 2 * BATCH
    assert stats['served_batches'] == [50, 50] and group.stop_iterations() == 50
    # 2 x 16 of 64 samples per round: about a quarter of a rank's samples are the other's too
    assert 0.05 < stats['duplicate_rate'] < 0.5


def test_bins_never_give_one_sample_to_two_ranks():
    buffers = Buffers([bin_buffer_id('buf', 0), bin_buffer_id('buf', 1)])
    buffers.push(bin_buffer_id('buf', 0), 64)
    buffers.push(bin_buffer_id('buf', 1), 64)
    group = LearnerGroup('buf', 2, buffers.data(), assignment='bins')
    received = serve_ranks(group, rounds=50)
    assert group.stats()['duplicate_samples'] == 0
    for rank in range(2):
        assert all(meta['data_id'].startswith(f'buf@bin{rank}#') for batch in received[rank] for meta in batch)


def test_collectors_are_binned_by_index():
    assert [collector_bin(f'collector{i}', 2) for i in range(4)] == [0, 1, 0, 1]
    group = LearnerGroup('buf', 2, Buffers([]).data(), assignment='bins')
    assert group.push_target('collector3') == 'buf@bin1'
    assert LearnerGroup('buf', 2, Buffers([]).data()).push_target('collector3') == 'buf'


def test_finish_releases_a_rank_waiting_for_its_round():
    buffers = Buffers(['buf'])
    group = LearnerGroup('buf', 2, buffers.data())
    result = []
    waiting = threading.Thread(target=lambda: result.append(group.serve(0, {'batch_size': BATCH}, alive=lambda: True)))
    waiting.start()
    group.finish('the run ends')
    waiting.join(5)
    assert result == [None] and group.stop_iterations() == 0


def test_consumed_once_data_is_drained_with_an_uneven_last_round():
    buffers = Buffers(['buf'], max_use=1)
    buffers.push('buf', 100)
    buffers.over = True
    group = LearnerGroup('buf', 2, buffers.data(), consumed_once=True)
    received = serve_ranks(group)
    stats = group.stats()
    # three full rounds of 2 x 16, then the 4 left split 2 / 2: every sample trained once
    assert [len(r) for r in received] == [4, 4] and stats['rounds'] == 4
    assert [len(b) for b in received[0]] == [16, 16, 16, 2]
    ids = [meta['data_id'] for rank in received for batch in rank for meta in batch]
    assert len(ids) == len(set(ids)) == 100
    assert stats['left_samples'] == 0 and stats['finish_reason'] == 'the data ended'


def uneven_bins(on_group_done):
    buffers = Buffers([bin_buffer_id('buf', 0), bin_buffer_id('buf', 1)], max_use=1)
    buffers.push(bin_buffer_id('buf', 0), 64)
    buffers.push(bin_buffer_id('buf', 1), 32)
    buffers.over = True
    group = LearnerGroup('buf', 2, buffers.data(), assignment='bins', on_group_done=on_group_done, consumed_once=True)
    return group, serve_ranks(group)


def test_bins_assist_reads_the_fuller_bin_once_its_own_is_empty():
    group, received = uneven_bins('assist')
    stats = group.stats()
    assert [len(r) for r in received] == [3, 3]
    assert stats['served_samples'] == 96 and stats['left_samples'] == 0
    assert stats['assisted_batches'] == 1  # rank 1's third batch came from bin 0
    assert received[1][2][0]['data_id'].startswith('buf@bin0#')


def test_bins_short_ends_when_one_bin_is_exhausted_and_counts_the_rest():
    group, received = uneven_bins('short')
    stats = group.stats()
    assert [len(r) for r in received] == [2, 2]
    assert stats['served_samples'] == 64 and stats['left_samples'] == 32
    assert 'short' in stats['finish_reason']
