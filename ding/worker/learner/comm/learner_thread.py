"""The thread of one learner task of the flask_fs comm learner (``run_learner``): train, then release what the
run holds in the order its peers rely on (learn infos, last weights, learner, replay client, process group)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ding.utils.atomic_file import StorageError
from ding.worker.learner.hook_base import iterations_done

from .learn_task_exchange import LearnTaskExchange
from .learner_run import LearnerRun


def run_learner(
    run: LearnerRun,
    exchange: Callable[[], LearnTaskExchange],
    publish: Callable[[dict[str, Any]], None],
    flush_policy: Callable[[float], bool],
    logger: Any,
    stop_timeout: float,
) -> None:
    """Train ``run.learner`` to its end (or until the run is stopped), then clean up; ``run.finished`` is set last.

    ``exchange``: the comm learner's live ``LearnTaskExchange``; ``publish``: its ``send_policy``;
    ``flush_policy(timeout)``: whether every policy file submitted was written in time.
    """
    learner = run.learner
    try:
        if not run.ending.is_set():
            learner.start()
        if not run.reason:
            run.reason = 'finished' if not run.ending.is_set() else 'closed'
    except BaseException as exc:  # noqa: B902 - reported to the coordinator through the next task
        if run.ending.is_set():
            run.reason = run.reason or 'closed'
        else:
            run.error = f'{type(exc).__name__}: {exc}'
            if isinstance(exc, StorageError):  # a checkpoint the disk refused: the run ends, naming it
                run.storage_failed(str(exc))
            logger.error(f'learner task {run.task_id} failed at iteration {learner.train_iter}: {run.error}')
    finally:
        exchange().flush_infos(run)  # infos grouped when the run stopped early: to a learn task waiting
        run.ending.set()
        if run.error is None and run.publish_skipped:
            # weights skipped for the publisher's interval (SendPolicyHook): the run's last ones go out
            try:
                publish({'model': learner.policy.state_dict()['model'], 'iter': iterations_done(learner)})
            except Exception as exc:
                logger.error(f'learner task {run.task_id}: cannot publish the last weights: {exc!r}')
        try:
            learner.close()
        except Exception as exc:
            logger.error(f'learner task {run.task_id}: error while closing the learner: {exc!r}')
        if run.replay is not None:
            run.replay.close()
        # The run's last weights are on disk before anyone is told it ended.
        if run.group is not None:  # a peer still waiting in a collective for this rank fails now
            run.group.leave()
        if not flush_policy(float(stop_timeout)):
            logger.error(f'learner task {run.task_id}: the last policy file was not written within {stop_timeout}s')
        logger.info(run.end_report())
        run.finished.set()  # last: whoever waits for it may start the next task at once
