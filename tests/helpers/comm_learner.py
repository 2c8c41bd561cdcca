"""Helpers of the comm learner tests: configs, DQN-shaped sample files, a coordinator's task calls."""

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ding.utils.file_transport import save_samples, unique_stem
from tests.helpers.tasks import failed, ok, run_task  # noqa: F401 - the tests import them from here

# Short spans keep the tests fast; production uses seconds.
FAST_MASTER = dict(
    heartbeat_tolerance=5.0,
    heartbeat_check_span=0.05,
    request_retries=1,
    request_retry_waiting=0.05,
    request_timeout=5.0,
)
OBS_DIM, ACTION_DIM, BATCH = 4, 2, 4


def comm_config(workdir: Any, **overrides: Any) -> dict[str, Any]:
    """A learner entry of the parallel system config, as the parallel worker hands it over."""
    cfg = dict(
        type='flask_fs',
        name='learner0',
        exp_name='exp',
        host='127.0.0.1',
        port=0,
        path_data=os.path.join(str(workdir), 'data'),
        path_policy=os.path.join(str(workdir), 'policy'),
        send_policy_freq=1,
        heartbeat_span=0.1,
        request_retries=1,
        request_retry_waiting=0.05,
        request_timeout=5.0,
        stop_timeout=10.0,
        # what the parallel worker allows from the run's config: the tasks' policy module
        allowed_import_names=['ding.policy.dqn'],
    )
    cfg.update(overrides)
    return cfg


def policy_config(**learn: Any) -> dict[str, Any]:
    learn_cfg = dict(batch_size=BATCH, learning_rate=0.01, target_update_freq=2)
    learn_cfg.update(learn)
    return dict(
        type='dqn',
        import_names=['ding.policy.dqn'],
        cuda=False,
        priority=True,
        model=dict(obs_shape=OBS_DIM, action_shape=ACTION_DIM, encoder_hidden_size_list=[16, 16]),
        learn=learn_cfg,
    )


def start_task(task_id: str, max_iterations: int, **learner: Any) -> dict[str, Any]:
    """A ``learner_start_task`` as the coordinator sends it (log table every iteration, no checkpoints)."""
    learner_cfg = dict(
        dataloader=dict(num_workers=0),
        hook=dict(load_ckpt_before_run='', log_show_after_iter=1, save_ckpt_after_iter=0, save_ckpt_after_run=False),
    )
    learner_cfg.update(learner)
    return {
        'name': 'learner_start_task',
        'task_info': {
            'task_id': task_id,
            'policy': policy_config(),
            'exp_name': 'exp',
            'learner_cfg': learner_cfg,
            'max_iterations': max_iterations,
            'instance_name': 'learner0',
            'policy_name': 'policy_learner0',
        },
    }


def dqn_samples(n: int, seed: int) -> list[dict[str, Any]]:
    """Samples shaped like the DQN collector's: obs / next_obs / action / reward / done (+ its bookkeeping)."""
    g = torch.Generator().manual_seed(seed)
    return [
        {
            'obs': torch.randn(OBS_DIM, generator=g),
            'next_obs': torch.randn(OBS_DIM, generator=g),
            'action': torch.randint(0, ACTION_DIM, (), generator=g),
            'reward': torch.rand((), generator=g),
            'done': bool(i % 5 == 4),
            'collect_iter': 0,
            'env_id': i % 2,
        }
        for i in range(n)
    ]


def write_sample_file(
    path_data: str, n: int, policy_iter: int = 0, seed: int = 0, task_id: str = 'collector_task'
) -> list[dict[str, Any]]:
    """Write ``n`` samples as one file, as a collector does; return their metadata (with buffer fields)."""
    ids = save_samples(path_data, unique_stem('samples'), dqn_samples(n, seed))
    return [
        {
            'data_id': d,
            'policy_iter': policy_iter,
            'collect_iter': policy_iter,
            'env_id': i % 2,
            'unroll_len': 1,
            'task_id': task_id,
            'priority': 1.0,
            'replay_unique_id': f'{d}-uid',
            'replay_buffer_idx': i,
        }
        for i, d in enumerate(ids)
    ]


def train(
    conn: Any,
    task_id: str,
    batch_for: Callable[[dict[str, Any]], list[dict[str, Any]]],
    max_rounds: int = 100,
    stop_after: int | None = None,
) -> list[dict[str, Any]]:
    """The coordinator's learner loop: get_data -> learn, until ``learner_done`` (or ``stop_after`` infos).

    ``batch_for(demand)`` returns the metadata for one demand. Returns every learn task's answer in order.
    """
    answers = []
    for _ in range(max_rounds):
        demand = ok(conn, {'name': 'learner_get_data_task', 'task_info': {'task_id': task_id}})
        info = ok(conn, {'name': 'learner_learn_task', 'task_info': {'task_id': task_id}, 'data': batch_for(demand)})
        answers.append(info)
        if info.get('learner_done') or (stop_after is not None and len(answers) >= stop_after):
            return answers
    raise AssertionError(f'the learner was not done after {max_rounds} learn tasks')


@contextlib.contextmanager
def serving(comm: Any, master: Any) -> Iterator[Any]:
    """Start ``comm`` and connect the coordinator's ``master`` to it; yields the connection, then disconnects
    and closes the comm learner, even when the test fails."""
    comm.start()
    try:
        connection = master.new_connection('learner0', '127.0.0.1', comm.port)
        connection.connect()
        try:
            yield connection
        finally:
            connection.disconnect()
    finally:
        comm.close()
