"""The comm collector as the parallel pipeline uses it: built by ``create_comm_collector`` from a compiled
parallel config (``compile_config_parallel`` + ``worker_config``), driven by the coordinator's real
``CommCoordinator`` with tasks made by the commander's ``make_collector_task``."""

import copy
import logging
import os
import threading
import time

from easydict import EasyDict

from ding.config.parallel import compile_config_parallel
from ding.entry.parallel_worker import worker_config
from ding.utils.file_transport import SampleReader, save_policy
from ding.worker.collector.comm import create_comm_collector
from ding.worker.coordinator.base_parallel_commander import make_collector_task
from ding.worker.coordinator.comm_coordinator import CommCoordinator
from dizoo.classic_control.cartpole.config.parallel import cartpole_dqn_config as dizoo_cfg


class _Recorder:
    """The coordinator's callbacks, recording what the comm coordinator reports."""

    def __init__(self):
        self.data = {}
        self.finished = {}
        self.failed = []
        self.changed = threading.Event()

    def callbacks(self):
        return {
            'deal_with_collector_send_data': lambda task_id, buffer_id, data: self.data.setdefault(task_id, []).extend(
                data
            ),
            'deal_with_collector_judge_finish': lambda task_id, info: bool(info.get('collector_done')),
            'deal_with_collector_finish_task': self._finish,
            'deal_with_collector_fail_task': lambda task, reason: self.failed.append((task['task_id'], reason)),
            'deal_with_increase_collector': lambda: None,
            'deal_with_decrease_collector': lambda: None,
            'deal_with_worker_change': lambda: None,
            'wait_for_data': time.sleep,
            'wait_collect_budget': lambda: True,  # no learner here to pace the collectors against
        }

    def _finish(self, task_id, info):
        self.finished[task_id] = info
        self.changed.set()

    def wait_finished(self, task_id, timeout=60.0):
        deadline = time.time() + timeout
        while task_id not in self.finished and not self.failed and time.time() < deadline:
            self.changed.wait(0.05)
        assert not self.failed, self.failed
        assert task_id in self.finished, f'{task_id} did not finish within {timeout}s'
        return self.finished[task_id]


def _compiled_config():
    main = copy.deepcopy(dizoo_cfg.main_config)
    main.exp_name = 'exp'
    main.env.update(collector_env_num=2, evaluator_env_num=2, n_evaluator_episode=2)
    main.policy.model.encoder_hidden_size_list = [16, 16]
    main.policy.collect.collector.update(collector_num=1, n_sample=48, chunk_size=16, update_policy_second=0.1)
    return compile_config_parallel(
        main, copy.deepcopy(dizoo_cfg.create_config), copy.deepcopy(dizoo_cfg.system_config), seed=0, save_cfg=False
    )


def test_comm_coordinator_runs_collect_and_eval_tasks_on_the_comm_collector(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _compiled_config()
    wcfg = worker_config(cfg, 'collector', 'collector0')
    wcfg.update(port=0, heartbeat_span=0.1, request_retries=1, request_retry_waiting=0.05)
    comm = create_comm_collector(wcfg)
    recorder = _Recorder()
    coordinator = None
    try:
        comm.start()
        coor_cfg = EasyDict(copy.deepcopy(dict(cfg.system.coordinator)))
        coor_cfg.update(
            port=0,
            learner={},
            collector={'collector0': ['collector0', '127.0.0.1', comm.port]},
            heartbeat_check_span=0.05,
            reconnect_interval=0.05,
        )
        coordinator = CommCoordinator(
            coor_cfg, recorder.callbacks(), logging.getLogger('test_coordinator'), system_cfg=cfg.system
        )
        coordinator.start()
        assert coordinator.wait_connected(30)

        # The learner task's policy file, as its SendPolicyHook publishes it.
        policy_name = 'policy_learner_task_1'
        save_policy(cfg.system.path_policy, policy_name, _model_weights(cfg), 4)

        task = make_collector_task(
            cfg.main,
            'collector_task_1',
            'buffer_1',
            policy_name,
            'learner_task_1',
            eval_flag=False,
            policy_kwargs={'eps': 0.3},
        )
        assert coordinator.send_collector_task(task)
        info = recorder.wait_finished('collector_task_1')
        data = recorder.data['collector_task_1']
        assert info['eval_flag'] is False and info['sample_count'] == len(data) >= 48
        assert info['step_count'] >= len(data) and info['policy_iter'] == 4
        assert {m['policy_iter'] for m in data} == {4} and {m['task_id'] for m in data} == {'collector_task_1'}
        reader = SampleReader(cfg.system.path_data)
        assert all(reader.read(m['data_id'])['obs'].shape == (4,) for m in data)
        assert os.path.isdir(os.path.join('exp', 'log', 'comm_collector0'))

        evaluation = make_collector_task(
            cfg.main, 'evaluator_task_2', 'buffer_1', policy_name, 'learner_task_1', eval_flag=True, policy_kwargs={}
        )
        assert coordinator.send_collector_task(evaluation)
        info = recorder.wait_finished('evaluator_task_2')
        assert info['eval_flag'] is True and info['episode_count'] == 2 and info['policy_iter'] == 4
        assert 1.0 <= info['reward_mean'] <= 200.0
        assert 'evaluator_task_2' not in recorder.data
    finally:
        if coordinator is not None:
            coordinator.close()
        comm.close()


def _model_weights(cfg):
    """Fresh weights of the compiled config's DQN model."""
    from ding.policy import create_policy

    policy = create_policy(copy.deepcopy(cfg.main.policy), enable_field=['collect'])
    return {k: v.clone() for k, v in policy.collect_mode.state_dict()['model'].items()}
