"""The learn-task data exchange of the flask_fs comm learner (``LearnTaskExchange``): data demands out to the
coordinator's get-data tasks, batches in from its learn tasks, learn infos back out with their answers.

Threads and the three length-one queues (the coordinator drives everything, one task at a time; the info
queue holds one list of what was handed over since a learn task last took it, ``InfoMailbox``)::

    coordinator --learner_get_data_task--> deal_with_get_data    <-- demand queue  <-- get_data (loader thread)
    coordinator --learner_learn_task-----> deal_with_learner_learn --> result queue --> get_data: read files,
                                                                                         return the batch
                                           deal_with_learner_learn <-- info mailbox   <-- SendLearnInfoHook
                                                                                         (learner thread)

The learner's ``AsyncDataLoader`` calls ``get_data`` again as soon as a batch is handed over, so the next
demand is already waiting while the current batch trains, and the learn info leaves before the slower
after-iteration hooks (policy file, log table, checkpoints) run; the policy file itself is written on a
publisher thread. Each learn task is answered with exactly one learn info: the one of the iteration that
trained its data. When every sample of a batch is unusable (unreadable file, or older than the learner
config's ``max_staleness``), no iteration trains on it: that learn task is answered with
``{'trained': False, 'infos': []}`` (no learn info) and the learner asks for data again.

With ``comm_batches`` k > 1 the demand carries ``num_batches: k``; its learn task brings k batches, which
``get_data`` hands over one per call, and is answered with ``{'infos': [...]}``: one learn info per batch
that trained (rejected batches add none), so the HTTP round trips cost once per k iterations. Such a learn
task is answered as soon as the learner has asked for the next k batches (its last batches may still be
training: their infos go with the next learn task), so the coordinator's round trip overlaps training;
the learn infos of a run stay exactly one per iteration, in order. The learn task of a run's last demand
(no later one follows to carry infos) waits for every info it owes, even when the learner ends meanwhile.

Every demand also opts in to batches as dicts of columns of the metadata fields the learner reads
(``'fields'``: those of ``METADATA_FIELDS`` its policy reads, see ``demand_fields``; ``'layout': 'columns'``,
see docs/parallel.md): less JSON to decode and no
per-sample dicts to walk. A coordinator that ignores the opt-in sends lists of dicts; both are accepted.
"""

from __future__ import annotations

import queue
import time
from typing import Any

from ding.interaction import TaskFail
from ding.utils.jsonable import to_jsonable

from .batch_loader import BatchLoader
from .learn_task_data import batch_size_of, learn_task_batches, number_or_none
from .learner_run import Demanded, InfoGroup, InfoMailbox, LearnerRun, Prepared, make_demand

# How often blocked queue operations wake up to see whether the learner task was closed (seconds).
POLL_S = 0.05
# What send_learn_info itself writes into the learner's scalar log buffer.
_OWN_SCALARS = ('policy_lag_min', 'policy_lag_mean', 'policy_lag_max', 'stale_dropped')


class LearnTaskExchange:
    """The three length-one queues of the comm learner and the code on both sides of them. ``run`` is the
    current learner task (set by the comm learner when a task starts); ``loader`` builds its batches;
    ``stop_timeout``: how long a task that finds its run ended waits for the learner thread to close."""

    def __init__(self, loader: BatchLoader, logger: Any, stop_timeout: float) -> None:
        self.run: LearnerRun | None = None
        self._loader = loader
        self._logger = logger
        self._stop_timeout = float(stop_timeout)
        self._data_demand_queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=1)
        self._data_result_queue: queue.Queue[Any] = queue.Queue(maxsize=1)
        self.info_mailbox = InfoMailbox()

    # ---- queue helpers -------------------------------------------------------------------------------
    @staticmethod
    def _put(q: queue.Queue[Any], item: Any, run: LearnerRun) -> bool:
        """Put into a length-one queue; False if the run ended first."""
        while not run.ending.is_set():
            try:
                q.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    @staticmethod
    def _get(q: queue.Queue[Any], run: LearnerRun) -> Any:
        """Take from a length-one queue; None if the run ended first (an item put just before still counts)."""
        while True:
            try:
                return q.get(timeout=POLL_S)
            except queue.Empty:
                if run.ending.is_set():
                    try:
                        return q.get_nowait()
                    except queue.Empty:
                        return None

    def _take(self, run: LearnerRun) -> list[Any] | None:
        """Everything in the info mailbox; None if the run ended first (items handed over just before count)."""
        while True:
            try:
                return self.info_mailbox.take(POLL_S)
            except queue.Empty:
                if run.ending.is_set():
                    try:
                        return self.info_mailbox.take_nowait()
                    except queue.Empty:
                        return None

    def drain(self) -> None:
        """Empty every queue (a new learner task starts)."""
        for q in (self._data_demand_queue, self._data_result_queue):
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        self.info_mailbox.clear()

    def ended(self, run: LearnerRun, what: str) -> TaskFail:
        """The failure for a task that found its run ended, once the learner thread is done (closed, and the
        exception checkpoint of a failure written) so that a new start task can follow at once."""
        run.finished.wait(self._stop_timeout)
        return TaskFail(run.refusal(), message=run.ended_message(what))

    def flush_infos(self, run: LearnerRun) -> None:
        """Hand over the learn infos still grouped when a run stops early (to a learn task still waiting)."""
        group = run.take_info_group()
        if group:
            self.info_mailbox.post([InfoGroup(group)])

    # ---- learner side (learner / data loader threads) ------------------------------------------------

    # ---- learner side (learner / data loader threads) ------------------------------------------------
    def get_data(self, batch_size: int) -> Any:
        """Ask the coordinator for a batch and return it, read from ``path_data`` (a collated dict, or a list of
        sample dicts where the files do not stack, see ``BatchLoader.load_batch``).

        Puts the demand ``{'batch_size', 'cur_learner_iter', 'task_id', 'fields', 'layout'}`` into the demand
        queue (see ``make_demand``), waits for the metadata, reads the files. A batch without one usable sample
        answers its learn task with no learn info and asks again. Once the run is ending it returns ``[]`` (the
        learner then stops) or None (no data).
        """
        run = self.run
        if run is None:
            return []
        # The policy's batch_size, not the loader's: a run-control tune of batch_size takes effect here.
        batch_size = run.learner.policy.get_attribute('batch_size')
        while not run.ending.is_set():
            if run.comm_batches > 1:
                metadata = self._next_of_group(run, batch_size)
                if metadata is None:
                    break
            else:
                if run.batches_handed >= run.learner.cfg.train_iterations:
                    # The learner needs no more batches this run: no demand, just wait for it to end.
                    run.ending.wait()
                    break
                demand = make_demand(run, batch_size, run.next_batch_iter())
                if not self._put(self._data_demand_queue, demand, run):
                    break
                metadata = self._get(self._data_result_queue, run)
                if metadata is None:
                    break
            if metadata.__class__ is Prepared:
                batch, versions, stale, unreadable = metadata.loaded
            else:
                batch, versions, stale, unreadable = self._loader.load_batch(run, metadata)
            if batch:
                run.batch_stats.append((versions, stale, unreadable))
                run.batch_handed()
                return batch
            # No iteration trains on this batch, so its learn task carries no learn info (``infos`` is empty);
            # the counts reach the coordinator with the next learn info.
            run.batch_rejected(stale, unreadable)
            message = (
                f'all {batch_size_of(metadata)} samples of the batch were rejected (stale: {stale}, '
                f'unreadable: {unreadable}); asking for new data'
            )
            self._logger.warning(f'learner task {run.task_id}: {message}')
            self.info_mailbox.post([{'task_id': run.task_id, 'trained': False, 'infos': [], 'message': message}])
        # Ending: an empty batch lets the learner's loop see its stop flag; until that flag is set (start()
        # clears it when it begins) answer "no data yet" so the learner never trains on an empty batch.
        return [] if run.learner.stop_requested else None

    def _next_of_group(self, run: LearnerRun, batch_size: int) -> Any:
        """The next batch's metadata with ``num_batches`` demands (None: the run ends, or needs no more data).

        The demand for the next group goes out as soon as fewer than ``comm_batches`` batches are left, so
        one group is on its way while the current one trains and the learner does not wait for the round trip.
        """
        while not run.ending.is_set():
            if run.demand_out:
                if run.pending:  # batches left to hand over: just look whether the next group is in
                    try:
                        received = self._data_result_queue.get_nowait()
                    except queue.Empty:
                        received = None
                else:
                    waited = time.perf_counter()
                    received = self._get(self._data_result_queue, run)
                    run.starved_s += time.perf_counter() - waited
                    if received is None:
                        return None
                if received is not None:
                    run.pending.extend(self._loader.load_group(run, received))
                    run.demand_out = False
            if not run.demand_out and len(run.pending) < 2 * run.comm_batches:
                wanted = run.learner.cfg.train_iterations - run.batches_handed - len(run.pending)
                if wanted > 0:
                    demand = make_demand(
                        run,
                        batch_size,
                        run.next_batch_iter() + len(run.pending),
                        num_batches=min(run.comm_batches, wanted),
                    )
                    # Counted before the demand is visible: its learn task reads the count as its own seq.
                    run.demands_issued += 1
                    if not self._put(self._data_demand_queue, demand, run):
                        return None
                    run.demand_out = True
                    group = run.take_info_group(ask_now=True)
                    self.info_mailbox.post(([InfoGroup(group)] if group else []) + [Demanded(run.demands_issued)])
            if run.pending:
                return run.pending.popleft()
            if not run.demand_out:
                # The learner needs no more batches this run: no demand, just wait for it to end.
                run.ending.wait()
                return None
        return None

    def send_learn_info(self, learn_info: dict[str, Any]) -> None:
        """Complete the learn info of the iteration just trained and hand it to the waiting learn task."""
        run = self.run
        if run is None or run.ending.is_set():
            return
        learner = run.learner
        version = learner.train_iter  # inside after_iter: the weights version that trained this batch
        policy_iters, stale, unreadable = run.batch_stats.popleft() if run.batch_stats else ([], 0, 0)
        carried_stale, carried_unreadable = run.batch_trained(version)
        stale += carried_stale
        unreadable += carried_unreadable
        scalar = learner.log_buffer['scalar']
        info: dict[str, Any] = {}
        for k, v in scalar.items():
            v = number_or_none(v)
            if v is not None and k not in _OWN_SCALARS:
                info[k] = v
        if 'total_loss' in info:
            info['loss'] = info['total_loss']
        if policy_iters:
            lag = {
                'min': version - max(policy_iters),
                'mean': version - sum(policy_iters) / len(policy_iters),
                'max': version - min(policy_iters),
            }
            scalar['policy_lag_min'] = lag['min']
            scalar['policy_lag_mean'] = lag['mean']
            scalar['policy_lag_max'] = lag['max']
        else:
            lag = None
        scalar['stale_dropped'] = stale
        priority_info = learn_info.get('priority_info')
        if run.replay is not None and priority_info:  # the replay service holds the samples: the priorities go there
            run.replay.update(priority_info)
            priority_info = None
        info.update(
            {
                'task_id': run.task_id,
                'trained': True,
                'learner_step': learn_info['learner_step'],
                'learner_done': bool(learn_info.get('learner_done', False)),
                'policy_iter': version + 1,
                'priority_info': to_jsonable(priority_info, on_unknown='repr') if priority_info else None,
                'policy_lag': lag,
                'stale_dropped': stale,
                'unreadable': unreadable,
            }
        )
        if info['learner_done']:
            run.reason = 'finished'
        run.reached_stop_iter()  # a data-parallel close: every rank stops after the same iteration
        if self.hand_over_info(run, info):
            run.last_info_clock = (time.perf_counter(), time.process_time(), time.thread_time())
            if run.first_info_clock is None:
                run.first_info_clock = run.last_info_clock
            run.learn_infos += 1

    def hand_over_info(self, run: LearnerRun, info: dict[str, Any]) -> bool:
        """Give one iteration's learn info to the learn tasks; False if the run ended first.

        A single-batch run puts each info into the queue (its learn task waits for exactly that one). A
        ``num_batches`` run groups them: an info goes at once when a learn task may be waiting for its first
        one (after each demand: it answers as soon as it has one), when it is the run's last, or when
        ``comm_batches`` are grouped; the data loader also hands the group over right before each demand's
        marker. Each hand-over wakes the learn task's thread, which costs the learner thread too.
        """
        if run.ending.is_set():
            return False
        if run.comm_batches <= 1:
            self.info_mailbox.post([info])
            return True
        group = run.group_info(info)
        if group is not None:
            self.info_mailbox.post([InfoGroup(group)])
        return True

    # ---- coordinator side (slave task threads) -------------------------------------------------------

    # ---- coordinator side (slave task threads) -------------------------------------------------------
    def answer_get_data(self, run: LearnerRun) -> dict[str, Any]:
        """Answer a get-data task with the learner's data demand (waits until the learner asks)."""
        began = run.task_began()
        if run.outstanding_demand is None:
            demand = self._get(self._data_demand_queue, run)
            if demand is None:
                raise self.ended(run, 'learner_get_data_task')
            # Kept until data arrives: a coordinator that asks again (e.g. it had too little data) gets it again.
            run.outstanding_demand = demand
        run.task_ended(began)
        return dict(run.outstanding_demand)

    def answer_learn(self, run: LearnerRun, data: Any) -> dict[str, Any]:
        """Hand the batch's metadata to the learner and answer with the learn info of the iteration it trained."""
        if run.outstanding_demand is None:
            raise TaskFail(
                message=f'learner_learn_task: learner task {run.task_id} has no data demand pending; '
                f'send learner_get_data_task first'
            )
        several = 'num_batches' in run.outstanding_demand
        batches = learn_task_batches(run.outstanding_demand, data)
        began = run.task_began()
        # The demand this learn task serves: the loader issues the next one only after receiving this data.
        served = run.demands_issued
        if not self._put(self._data_result_queue, data, run):
            raise self.ended(run, 'learner_learn_task')
        run.outstanding_demand = None
        if not several:
            items = self._take(run)
            if items is None:
                raise self.ended(run, 'learner_learn_task')
            if len(items) > 1:  # not this task's: the next one's
                self.info_mailbox.post(items[1:], front=True)
            run.task_ended(began)
            return items[0]
        # One answer is owed per batch received, in order: a learn info, or the rejection of a batch nothing
        # trained on. Once the learner has asked for batches beyond this demand's (and some infos are in),
        # answer with what is there: the learn task bringing those batches carries the rest, so the learner
        # keeps training meanwhile. Without such a later demand (the run's last one) every owed answer is
        # waited for: no learn task follows to carry it.
        run.owed += len(batches)
        infos: list[dict[str, Any]] = []
        messages: list[str] = []
        demanded = False
        taken: list[Any] = []  # taken from the mailbox, not looked at yet
        while run.owed > 0 and not (demanded and infos):
            if not taken:
                items = self._take(run)
                if items is None:
                    if infos:  # the run stopped part-way (closed / failed): the iterations that trained still count
                        break
                    raise self.ended(run, 'learner_learn_task')
                taken = items
            answer = taken.pop(0)
            if answer.__class__ is Demanded:
                demanded = demanded or answer.seq > served
                continue
            for one in answer.items if answer.__class__ is InfoGroup else (answer,):
                run.owed -= 1
                if one.get('trained'):
                    infos.append(one)
                elif one.get('message'):
                    messages.append(one['message'])
        if taken:  # answers for the next learn task
            self.info_mailbox.post(taken, front=True)
        run.task_ended(began)
        result: dict[str, Any] = {'task_id': run.task_id, 'trained': bool(infos), 'infos': infos}
        if messages:
            result['message'] = '; '.join(messages)
        return result
