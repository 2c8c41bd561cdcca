"""Starting a learner task of the flask_fs comm learner, in the ways that end in a ``TaskFail`` the coordinator acts
on: the checks of the start task's settings (``start_task_settings``), data-parallel group (``start_task_group``)
and replay client (``start_task_replay``), then joining the group and building the run (``join_then_build``).
A refusal names the field; a config the task cannot run with is a config refusal (``CONFIG_REFUSAL``: it fails
on every learner, so the coordinator ends the run)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.config.errors import CONFIG_REFUSAL, ConfigError
from ding.interaction import TaskFail
from ding.worker.replay_service import replay_client_of
from ding.worker.task_fields import TaskFieldError

from .dist_group import DistSettings
from .learner_run import LearnerRun
from .task_setup import TaskSettings


def start_task_settings(cfg: Any, task_id: str, task_info: dict[str, Any], logger: Any) -> TaskSettings:
    """The start task's settings; a task refused for one of its fields fails naming it (a running task is
    left alone, nothing of the new one was imported, built or written)."""
    try:
        return TaskSettings.of(cfg, task_info)
    except TaskFieldError as exc:
        logger.warning(f'learner_start_task {task_id}: {exc}')
        raise TaskFail({'task_id': task_id, 'field': exc.field}, f'learner_start_task {task_id}: {exc}') from exc
    except ValueError as exc:
        # a setting the task cannot run with (a ConfigError) fails on every learner: the coordinator ends the run
        refusal = {CONFIG_REFUSAL: True} if isinstance(exc, ConfigError) else {}
        raise TaskFail(
            {'task_id': task_id, **refusal},
            f'learner_start_task {task_id}: cannot create the learner: {type(exc).__name__}: {exc}',
        ) from exc


def start_task_group(task_id: str, task_info: dict[str, Any]) -> DistSettings | None:
    """The task's data-parallel group (``dist``), None when it trains alone; a bad field is a config refusal."""
    try:
        return DistSettings.of(task_info)
    except ConfigError as exc:
        raise TaskFail({'task_id': task_id, CONFIG_REFUSAL: True}, f'learner_start_task {task_id}: {exc}') from exc


def start_task_replay(task_info: dict[str, Any]) -> EasyDict | None:
    """The replay client config of the task's policy (None: batches from sample files); a bad one is a config
    refusal."""
    try:
        return replay_client_of(task_info.get('policy'))
    except ConfigError as exc:
        raise TaskFail({CONFIG_REFUSAL: True}, f'learner_start_task {task_info["task_id"]}: {exc}') from exc


def join_then_build(
    task_id: str, group: DistSettings | None, build: Callable[[], LearnerRun], logger: Any
) -> LearnerRun:
    """Join the task's process group (if any), then ``build`` its run; the group is left again when that fails,
    and an error other than a ``TaskFail`` fails the task as 'cannot create the learner'."""
    try:
        if group is not None:  # every rank joins before its policy is built (which broadcasts rank 0's)
            logger.info(f'learner task {task_id}: joining the process group as {group.describe()}')
            joined = time.monotonic()
            group.join()
            logger.info(f'learner task {task_id}: joined in {time.monotonic() - joined:.2f}s')
        return build()
    except TaskFail:
        if group is not None:
            group.leave()
        raise
    except Exception as exc:
        if group is not None:
            group.leave()
        logger.exception(f'learner_start_task {task_id}: cannot create the learner')
        raise TaskFail(
            # a config the task cannot run with fails on every learner: the coordinator ends the run
            {CONFIG_REFUSAL: True} if isinstance(exc, ConfigError) else None,
            message=f'learner_start_task {task_id}: cannot create the learner: {type(exc).__name__}: {exc}',
        ) from exc
