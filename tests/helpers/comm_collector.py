"""Helpers of the comm collector tests: configs, a coordinator's task calls, publishing real DQN weights."""

import os
import time
from collections.abc import Callable
from typing import Any

from ding.policy import create_policy
from ding.utils.file_transport import save_policy
from tests.helpers.tasks import failed, ok, run_task  # noqa: F401 - the tests import them from here

# Short spans keep the tests fast; production uses seconds.
FAST_MASTER = dict(
    heartbeat_tolerance=5.0,
    heartbeat_check_span=0.05,
    request_retries=1,
    request_retry_waiting=0.05,
    request_timeout=5.0,
)
POLICY_NAME = 'policy_learner0'


def comm_config(workdir: Any, **overrides: Any) -> dict[str, Any]:
    """A collector entry of the parallel system config, as the parallel worker hands it over."""
    cfg = dict(
        type='flask_fs',
        name='collector0',
        exp_name='exp',
        host='127.0.0.1',
        port=0,
        path_data=os.path.join(str(workdir), 'data'),
        path_policy=os.path.join(str(workdir), 'policy'),
        seed=0,
        heartbeat_span=0.1,
        request_retries=1,
        request_retry_waiting=0.05,
        request_timeout=5.0,
        data_wait_second=2.0,
        stop_timeout=10.0,
        # what the parallel worker allows from the run's config: the tasks' policy and env modules
        allowed_import_names=['ding.policy.dqn', 'dizoo.classic_control.cartpole.envs.cartpole_env'],
    )
    cfg.update(overrides)
    return cfg


def env_config(**overrides: Any) -> dict[str, Any]:
    cfg = dict(
        type='cartpole',
        import_names=['dizoo.classic_control.cartpole.envs.cartpole_env'],
        collector_env_num=2,
        evaluator_env_num=2,
        n_evaluator_episode=2,
        manager=dict(type='base'),
    )
    cfg.update(overrides)
    return cfg


def policy_config() -> dict[str, Any]:
    return dict(
        type='dqn',
        import_names=['ding.policy.dqn'],
        cuda=False,
        model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[16, 16]),
        collect=dict(n_sample=8, unroll_len=1),
        eval=dict(evaluator=dict(n_episode=2)),
    )


def start_task(
    task_id: str, workdir: Any, eval_flag: bool = False, eps: float = 0.5, **collector: Any
) -> dict[str, Any]:
    """A ``collector_start_task`` as the coordinator sends it (the policy *file* as ``path_policy``)."""
    collector_cfg = dict(type='zergling', update_policy_second=0.05, n_sample=10**7, chunk_size=16)
    collector_cfg.update(collector)
    return {
        'name': 'collector_start_task',
        'task_info': {
            'task_id': task_id,
            'collector_cfg': collector_cfg,
            'env': env_config(),
            'policy': policy_config(),
            'exp_name': 'exp',
            'eval_flag': eval_flag,
            'policy_kwargs': {} if eval_flag else {'eps': eps},
            'instance_name': 'collector0',
            'path_data': os.path.join(str(workdir), 'data'),
            'path_policy': policy_path(workdir),
        },
    }


def policy_path(workdir: Any) -> str:
    return os.path.join(str(workdir), 'policy', POLICY_NAME + '.safetensors')


def dqn_weights(seed: int) -> dict[str, Any]:
    """Fresh weights of the test's DQN model (what a learner's ``policy.state_dict()['model']`` holds)."""
    import torch

    torch.manual_seed(seed)
    policy = create_policy(policy_config(), enable_field=['collect'])
    return {k: v.clone() for k, v in policy.collect_mode.state_dict()['model'].items()}


def publish(workdir: Any, policy_iter: int, weights: dict[str, Any] | None = None) -> dict[str, Any]:
    """Publish weights as the learner does (``save_policy``); returns them."""
    weights = dqn_weights(policy_iter) if weights is None else weights
    save_policy(os.path.join(str(workdir), 'policy'), POLICY_NAME, weights, policy_iter)
    return weights


def data_task(task_id: str) -> dict[str, Any]:
    return {'name': 'collector_data_task', 'task_info': {'task_id': task_id}}


def close_task(task_id: str) -> dict[str, Any]:
    return {'name': 'collector_close_task', 'task_info': {'task_id': task_id}}


def collect_until(
    conn: Any, task_id: str, stop: Callable[[list[dict[str, Any]]], bool], timeout: float = 60.0
) -> list[dict[str, Any]]:
    """The coordinator's collector loop: data tasks until ``stop(metadata so far)``; returns all metadata."""
    metadata: list[dict[str, Any]] = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        answer = ok(conn, data_task(task_id))
        assert answer['task_id'] == task_id
        assert 'finish_info' not in answer, f'the task finished early: {answer}'
        metadata.extend(answer['data'])
        if stop(metadata):
            return metadata
    raise AssertionError(f'condition not met within {timeout}s ({len(metadata)} samples)')


def run_to_finish(conn: Any, task_id: str, max_answers: int = 200) -> Any:
    """Data tasks until the finish info comes; returns (metadata, finish_info)."""
    metadata: list[dict[str, Any]] = []
    for _ in range(max_answers):
        answer = ok(conn, data_task(task_id))
        if 'finish_info' in answer:
            return metadata, answer['finish_info']
        metadata.extend(answer['data'])
    raise AssertionError(f'no finish info after {max_answers} data tasks')


def log_text(workdir: Any, name: str = 'collector0') -> str:
    path = os.path.join(str(workdir), 'exp', 'log', f'comm_{name}', f'comm_{name}_logger.txt')
    with open(path, encoding='utf-8') as f:
        return f.read()
