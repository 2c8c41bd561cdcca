"""The defaults of the coordinator's config (``system.coordinator``), one comment per setting."""

from __future__ import annotations

from typing import Any

COORDINATOR_DEFAULTS: dict[str, Any] = dict(
    # seconds a queued task may wait for an idle worker before it is given up
    collector_task_timeout=30.0,
    learner_task_timeout=600.0,
    # seconds one request to a worker may take (e.g. a collector producing one batch of data)
    # before the worker counts as dead
    collector_request_timeout=30.0,
    learner_request_timeout=30.0,
    # how often a task whose worker died is given to another worker before it is given up
    task_retries=3,
    # seconds before a failed task is offered to the workers again
    retry_delay=0.5,
    # pacing: collectors are asked for more data only while the samples pushed so far stay below
    # pacing_warmup_samples + max_samples_per_iter * learner iterations (or while the learner waits
    # for data); this keeps the replay ratio near the serial pipeline's instead of letting collectors
    # take the CPU the learner needs. None: collectors run free (DI-engine's behaviour).
    max_samples_per_iter=None,
    pacing_warmup_samples=1000,
    # interaction layer: the master drops a slave silent for heartbeat_tolerance seconds
    heartbeat_tolerance=15.0,
    heartbeat_check_span=0.5,
    request_retries=1,
    request_retry_waiting=0.2,
    channel=0,
    # seconds between attempts to (re)connect to a worker that is not connected
    reconnect_interval=0.5,
    # log the learner's policy lag and the buffer size every this many learner iterations
    log_every_iter=200,
    # sample files in path_data that no replay buffer refers to any more are deleted every
    # data_gc_interval seconds once older than data_gc_min_age seconds (a learner may still be
    # reading them), and all of them when the coordinator closes unless keep_data
    data_gc_interval=30.0,
    data_gc_min_age=60.0,
    keep_data=False,
    operator_server=dict(),
    # multi_learner.mode='data_parallel': the port learner0 (rank 0) opens for the learners' process group;
    # None or 'auto': a free one on learner0's host (give it explicitly when learner0 is on another machine)
    dist_port=None,
)
