"""Small real workers that speak the parallel protocol (docs/parallel.md), for the coordinator tests.

``ToyLearnerSlave`` and ``ToyCollectorSlave`` are real interaction slaves (HTTP servers) with a small
real behaviour: the collector writes real sample files (``ding.utils.file_transport``) whose value is the
policy iteration it read from the learner's real policy file; the learner reads every sample it is
sent from disk, "learns" their mean, publishes a policy file every iteration and reports its policy
lag; an evaluation returns the policy iteration as its reward. So a run reaches ``stop_value`` once the
learner has done ``stop_value`` iterations *and* an evaluation has seen them through the policy file.

They are registered as comm learner / comm collector ``'toy'`` so that ``parallel_worker`` can run them
as processes, together with a ``'toy_command'`` policy and a ``'toy'`` parallel collector config.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from typing import Any

import torch
from easydict import EasyDict

from ding.interaction import Slave, TaskFail
from ding.policy.base_policy import Policy
from ding.utils.file_transport import SampleReader, load_policy, save_policy, save_samples, unique_stem
from ding.utils.registry import (
    COMM_COLLECTOR_REGISTRY,
    COMM_LEARNER_REGISTRY,
    PARALLEL_COLLECTOR_REGISTRY,
    POLICY_REGISTRY,
)

TOY_MODULE = 'tests.helpers.toy_workers'
FAST_SLAVE = dict(heartbeat_span=0.2, request_retries=1, request_retry_waiting=0.05, request_timeout=5.0)


class ToyLearnerSlave(Slave):
    """A learner: demand ``batch_size`` samples, read them, count iterations, publish weights."""

    def __init__(self, host: str = '127.0.0.1', port: int = 0, iter_sleep: float = 0.0, **kwargs: Any) -> None:
        super().__init__(host, port, **{**FAST_SLAVE, **kwargs})
        self.iter_sleep = iter_sleep
        self.task_info: dict[str, Any] | None = None
        self.iter = 0
        self.started_tasks: list[dict[str, Any]] = []
        self.batches: list[int] = []
        self.max_lag = 0
        self.bad_samples = 0
        self._reader: SampleReader | None = None

    def _process_task(self, task: dict[str, Any]) -> dict[str, Any]:
        name = task.get('name')
        if name == 'resource':
            return {'cpu': 1, 'gpu': 0}
        if name == 'learner_start_task':
            info = task['task_info']
            self.task_info = info
            self.started_tasks.append(info)
            self._reader = SampleReader(info['path_data'])
            resume = info.get('resume')
            self.iter = 0
            if resume:  # continue from the last published weights, if they verify (a kill may cut a save)
                try:
                    self.iter = load_policy(os.path.join(info['path_policy'], info['policy_name'] + '.safetensors'))[1]
                except Exception:
                    self.iter = 0
            self._publish()
            return {'message': 'learner task has started'}
        info = self.task_info
        task_id = (task.get('task_info') or {}).get('task_id')
        if info is None or task_id != info['task_id']:
            raise TaskFail(message=f'{name}: unknown learner task {task_id!r}')
        if name == 'learner_get_data_task':
            return {
                'batch_size': int(info['policy']['learn']['batch_size']),
                'cur_learner_iter': self.iter,
                'task_id': task_id,
            }
        if name == 'learner_learn_task':
            data = task['data']
            if len(data) != info['policy']['learn']['batch_size']:
                raise TaskFail(message=f'expected a batch of {info["policy"]["learn"]["batch_size"]}, got {len(data)}')
            values = []
            for meta in data:
                try:
                    values.append(float(self._reader.read(meta['data_id'])['x']))
                except Exception:
                    self.bad_samples += 1
            lags = [self.iter - int(m['collect_iter']) for m in data]
            self.max_lag = max(self.max_lag, max(lags))
            if self.iter_sleep:
                time.sleep(self.iter_sleep)
            self.iter += 1
            self.batches.append(len(data))
            self._publish()
            return {
                'learner_step': self.iter,
                'policy_iter': self.iter,
                'task_id': task_id,
                'learner_done': self.iter >= int(info['max_iterations']),
                'priority_info': None,
                'policy_lag': {'min': min(lags), 'mean': sum(lags) / len(lags), 'max': max(lags)},
                'stale_dropped': 0,
                'loss': sum(values) / max(1, len(values)),
            }
        if name == 'learner_close_task':
            last, self.task_info = self.iter, None
            return {'message': 'learner task has closed', 'last_iter': last, 'task_id': task_id}
        raise TaskFail(message=f'unknown learner task name {name!r}')

    def _publish(self) -> None:
        info = self.task_info
        save_policy(info['path_policy'], info['policy_name'], {'w': torch.tensor([float(self.iter)])}, self.iter)


class ToyCollectorSlave(Slave):
    """A collector: ``calls_per_task`` answers of ``samples_per_call`` samples, then its finish info.

    An evaluation task answers at once with ``reward_mean`` = the policy iteration it loaded.
    ``hang=True`` makes data tasks block until the slave closes (a stuck worker). ``read_policy_every_call``
    False reads the weights only at task start (stale data, for the staleness tests).
    """

    def __init__(
        self,
        host: str = '127.0.0.1',
        port: int = 0,
        samples_per_call: int = 8,
        calls_per_task: int = 4,
        step_sleep: float = 0.01,
        hang: bool = False,
        read_policy_every_call: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(host, port, **{**FAST_SLAVE, **kwargs})
        self.samples_per_call = samples_per_call
        self.calls_per_task = calls_per_task
        self.step_sleep = step_sleep
        self.hang = hang
        self.read_policy_every_call = read_policy_every_call
        self.task_info: dict[str, Any] | None = None
        self.calls = 0
        self.policy_iter = 0
        self.tasks: list[dict[str, Any]] = []
        self.in_data_task = threading.Event()

    def _load_policy_iter(self) -> int:
        try:
            return load_policy(self.task_info['path_policy'])[1]
        except Exception:  # no weights yet, or a bad file: keep the last good ones
            return self.policy_iter

    def _process_task(self, task: dict[str, Any]) -> dict[str, Any]:
        name = task.get('name')
        if name == 'resource':
            return {'cpu': 1, 'gpu': 0}
        if name == 'collector_start_task':
            self.task_info = task['task_info']
            self.tasks.append(self.task_info)
            self.calls = 0
            self.policy_iter = self._load_policy_iter()
            return {'message': 'collector task has started'}
        info = self.task_info
        task_id = (task.get('task_info') or {}).get('task_id')
        if info is None or task_id != info['task_id']:
            raise TaskFail(message=f'{name}: unknown collector task {task_id!r}')
        if name == 'collector_data_task':
            self.in_data_task.set()
            if self.hang:
                self._stopping.wait(60)
                raise TaskFail(message='stopped while hanging')
            time.sleep(self.step_sleep)
            if self.read_policy_every_call:
                self.policy_iter = self._load_policy_iter()
            if info['eval_flag']:
                return {'task_id': task_id, 'finish_info': self._finish_info(float(self.policy_iter), 0)}
            if self.calls >= self.calls_per_task:
                return {'task_id': task_id, 'finish_info': self._finish_info(0.0, self.calls * self.samples_per_call)}
            self.calls += 1
            samples = [{'x': torch.tensor(float(self.policy_iter))} for _ in range(self.samples_per_call)]
            ids = save_samples(info['path_data'], unique_stem(info['instance_name']), samples)
            meta = [
                {
                    'data_id': d,
                    'policy_iter': self.policy_iter,
                    'collect_iter': self.policy_iter,
                    'env_id': k,
                    'unroll_len': 1,
                    'task_id': task_id,
                    'priority': 1.0,
                }
                for k, d in enumerate(ids)
            ]
            return {'task_id': task_id, 'data': meta}
        if name == 'collector_close_task':
            self.task_info = None
            return {'message': 'collector task has closed', 'task_id': task_id}
        raise TaskFail(message=f'unknown collector task name {name!r}')

    def _finish_info(self, reward: float, steps: int) -> dict[str, Any]:
        return {
            'task_id': self.task_info['task_id'],
            'eval_flag': bool(self.task_info['eval_flag']),
            'episode_count': 1,
            'step_count': steps,
            'reward_mean': reward,
            'reward_std': 0.0,
            'reward_max': reward,
            'reward_min': reward,
            'policy_iter': self.policy_iter,
            'collector_done': True,
        }


# ---- registered components, so that parallel_worker / compile_config_parallel can use them ------------
class _ToyComm:
    slave_cls: type = Slave
    extra: dict[str, Any] = {}

    def __init__(self, cfg: dict[str, Any]) -> None:
        self._cfg = cfg
        kwargs = {k: cfg[k] for k in self.extra if k in cfg}
        # The run secret the parallel worker process puts in its config (in memory), as real comm workers use it.
        self._slave = self.slave_cls(cfg['host'], int(cfg['port']), secret=cfg.get('secret'), **kwargs)

    def start(self) -> None:
        self._slave.start()

    def close(self) -> None:
        self._slave.close()

    @property
    def port(self) -> int:
        return self._slave.port


@COMM_LEARNER_REGISTRY.register('toy')
class ToyCommLearner(_ToyComm):
    slave_cls = ToyLearnerSlave
    extra = {'iter_sleep': 0.0}


@COMM_COLLECTOR_REGISTRY.register('toy')
class ToyCommCollector(_ToyComm):
    slave_cls = ToyCollectorSlave
    extra = {'samples_per_call': 8, 'calls_per_task': 4, 'step_sleep': 0.01}


@PARALLEL_COLLECTOR_REGISTRY.register('toy')
class ToyParallelCollector:
    """Only its config: the defaults ``compile_config_parallel`` merges under ``policy.collect.collector``."""

    config = dict(type='toy', collector_num=1, update_policy_second=3)

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(copy.deepcopy(cls.config))


@POLICY_REGISTRY.register('toy_command')
class ToyCommandPolicy(Policy):
    """Command mode only: epsilon decays linearly with the learner's iterations."""

    config = dict(
        type='toy_command',
        cuda=False,
        on_policy=False,
        priority=False,
        priority_IS_weight=False,
        model=dict(),
        learn=dict(batch_size=4, learning_rate=0.001),
        collect=dict(n_sample=8),
        eval=dict(),
        other=dict(eps=dict(start=1.0, end=0.0, decay=100)),
    )

    def _init_learn(self) -> None:
        raise NotImplementedError('the toy policy only has a command mode')

    _init_collect = _init_eval = _init_learn

    def _init_command(self) -> None:
        self._eps = self._cfg.other.eps

    def _get_setting_collect(self, command_info: dict[str, Any]) -> dict[str, Any]:
        frac = min(1.0, command_info['learner_step'] / self._eps.decay)
        return {'eps': self._eps.start + (self._eps.end - self._eps.start) * frac}

    def _forward_learn(self, data: Any) -> dict[str, Any]:
        raise NotImplementedError

    _forward_collect = _forward_eval = _process_transition = _get_train_sample = _forward_learn


def toy_config(
    exp_name: str,
    collector_num: int = 2,
    learner_num: int = 1,
    stop_value: float = 20,
    commander: str = 'solo',
    eval_interval: float = 0.3,
    batch_size: int = 4,
    replay_buffer: dict[str, Any] | None = None,
    commander_extra: dict[str, Any] | None = None,
    coordinator: dict[str, Any] | None = None,
    collector_extra: dict[str, Any] | None = None,
    learner_extra: dict[str, Any] | None = None,
):
    """``(main_config, create_config, system_config)`` of a toy parallel run.

    ``learner_extra`` / ``collector_extra`` are options of the toy slaves (e.g. ``iter_sleep``,
    ``calls_per_task``), written into every worker's system entry, which is what a comm worker reads.
    """
    main = dict(
        exp_name=exp_name,
        env=dict(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1, stop_value=stop_value),
        policy=dict(
            learn=dict(batch_size=batch_size, learner=dict(learner_num=learner_num, train_iterations=int(1e9))),
            collect=dict(collector=dict(collector_num=collector_num)),
            other=dict(
                replay_buffer=dict(replay_buffer_size=1000, **(replay_buffer or {})),
                commander=dict(eval_interval=eval_interval, **(commander_extra or {})),
            ),
        ),
    )
    create = dict(
        env=dict(type='cartpole', import_names=['dizoo.classic_control.cartpole.envs.cartpole_env']),
        env_manager=dict(type='base'),
        policy=dict(type='toy_command', import_names=[TOY_MODULE]),
        learner=dict(type='base', import_names=['ding.worker.learner.base_learner']),
        collector=dict(type='toy', import_names=[TOY_MODULE]),
        commander=dict(type=commander),
        comm_learner=dict(type='toy', import_names=[TOY_MODULE]),
        comm_collector=dict(type='toy', import_names=[TOY_MODULE]),
        replay_buffer=dict(type='advanced'),
    )
    system = dict(
        coordinator=dict(
            heartbeat_tolerance=5.0, heartbeat_check_span=0.1, reconnect_interval=0.2, **(coordinator or {})
        ),
        path_data='./{exp_name}/data',
        path_policy='./{exp_name}/policy',
        communication_mode='auto',
        learner={f'learner{i}': dict(learner_extra or {}) for i in range(learner_num)},
        collector={f'collector{i}': dict(collector_extra or {}) for i in range(collector_num)},
    )
    return EasyDict(main), EasyDict(create), EasyDict(system)
