"""Duplicate-sample rate of data-parallel learners: how many of the samples a rank trains in a round another rank
trains in the same round, with ``assignment='random'`` (one shared replay buffer) against ``'bins'`` (a buffer per
rank), for replay buffers of several sizes and rounds of 1 and 64 batches per rank (``comm_batches``).

Runs the coordinator's ``LearnerGroup`` on real replay buffers (no learner: only the sampling). Prints a table.

    python benchmarks/multi_learner_assignment.py
"""

from __future__ import annotations

import threading

from easydict import EasyDict

from ding.worker.coordinator.learner_group import GroupData, LearnerGroup, bin_buffer_id
from ding.worker.replay_buffer import create_buffer

RANKS = 2
BATCH = 64
ROUNDS = 20


def measure(assignment: str, samples: int, batches: int) -> float:
    """Duplicate rate over ``ROUNDS`` rounds; ``samples`` in the run's buffers in all (split over the bins)."""
    ids = ['buf'] if assignment == 'random' else [bin_buffer_id('buf', r) for r in range(RANKS)]
    buffers = {}
    for buffer_id in ids:
        cfg = EasyDict(type='advanced', replay_buffer_size=samples, priority=False)
        buffers[buffer_id] = create_buffer(cfg, exp_name='multi_learner_assignment', instance_name=buffer_id)
        per_buffer = samples // len(ids)
        buffers[buffer_id].push([{'data_id': f'{buffer_id}#{i}'} for i in range(per_buffer)])
    data = GroupData(
        sample=lambda b, size, it: buffers[b].sample(size, it),
        count=lambda b: buffers[b].count(),
        wait_for_data=lambda timeout: None,
        collection_over=lambda: False,
    )
    group = LearnerGroup('buf', RANKS, data, assignment=assignment)
    demand = {'batch_size': BATCH, 'num_batches': batches, 'cur_learner_iter': 0}

    def rank_loop(rank: int) -> None:
        for _ in range(ROUNDS):
            group.serve(rank, demand, alive=lambda: True)

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(RANKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for buffer in buffers.values():
        buffer.close()
    return group.stats()['duplicate_rate']


def main() -> None:
    print(f'{RANKS} ranks, batch {BATCH}, {ROUNDS} rounds: share of the samples served that another rank trained in')
    print('the same round (duplicate_rate)')
    print(f'{"buffer samples":>15} {"batches/round":>14} {"random":>8} {"bins":>8}')
    for samples in (2000, 20000):
        for batches in (1, 64):
            random_rate = measure('random', samples, batches)
            bins_rate = measure('bins', samples, batches)
            print(f'{samples:>15} {batches:>14} {100 * random_rate:>7.2f}% {100 * bins_rate:>7.2f}%')


if __name__ == '__main__':
    main()
