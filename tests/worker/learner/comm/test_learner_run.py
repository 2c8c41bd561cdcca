"""The comm learner's learn-info queue is length one like its demand and result queues (``InfoMailbox``): its
one item is the list of what was handed over since a learn task last took it, so a hand-over never waits."""

import queue
import threading

import pytest

from ding.worker.learner.comm.batch_loader import BatchLoader
from ding.worker.learner.comm.learn_task_exchange import LearnTaskExchange
from ding.worker.learner.comm.learner_run import Demanded, InfoGroup, InfoMailbox


def test_the_exchange_queues_are_all_length_one():
    exchange = LearnTaskExchange(BatchLoader(None, None), None, stop_timeout=1.0)
    assert exchange.info_mailbox.maxsize == 1


def test_hand_overs_never_wait_and_arrive_in_order():
    mailbox = InfoMailbox()
    mailbox.post([{'i': 0}])
    mailbox.post([InfoGroup([{'i': 1}, {'i': 2}]), Demanded(1)])  # the queue's one slot is taken: merged
    mailbox.post([])  # nothing to hand over: no empty item
    items = mailbox.take(timeout=1)
    assert [type(x) for x in items] == [dict, InfoGroup, Demanded]
    assert items[0] == {'i': 0} and items[1].items == [{'i': 1}, {'i': 2}] and items[2].seq == 1
    with pytest.raises(queue.Empty):
        mailbox.take_nowait()


def test_what_a_learn_task_does_not_answer_goes_back_in_front():
    mailbox = InfoMailbox()
    mailbox.post([{'i': 0}, {'i': 1}])
    first, *rest = mailbox.take(timeout=1)
    mailbox.post([{'i': 2}])  # handed over meanwhile
    mailbox.post(rest, front=True)
    assert first == {'i': 0} and mailbox.take(timeout=1) == [{'i': 1}, {'i': 2}]


def test_concurrent_hand_overs_lose_nothing():
    mailbox = InfoMailbox()
    received = []
    done = threading.Event()

    def consume():  # until the producers are done and nothing is left
        while True:
            try:
                received.extend(mailbox.take(timeout=0.01))
            except queue.Empty:
                if done.is_set():
                    return

    def produce(k):
        for i in range(200):
            mailbox.post([(k, i)])

    consumer = threading.Thread(target=consume)
    consumer.start()
    producers = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for t in producers:
        t.start()
    for t in producers:
        t.join()
    done.set()
    consumer.join(10)
    assert sorted(received) == sorted((k, i) for k in range(4) for i in range(200))
    for k in range(4):  # each producer's items in the order it handed them over
        assert [i for kk, i in received if kk == k] == list(range(200))
