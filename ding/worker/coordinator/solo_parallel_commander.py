"""The ``solo`` commander: one learner task, collector tasks on every free collector, periodic evaluation,
and the end of the run when an evaluation reaches ``env.stop_value``."""

from __future__ import annotations

import time
from typing import Any

from easydict import EasyDict

from ding.utils.log_helper import build_logger, close_logger
from ding.utils.registry import COMMANDER_REGISTRY

from .base_parallel_commander import (
    BaseCommander,
    TaskSpace,
    command_info,
    command_policy,
    get_task_uid,
    make_collector_task,
    make_learner_task,
)


@COMMANDER_REGISTRY.register('solo')
class SoloCommander(BaseCommander):
    """Train one policy against the environment until it is good enough.

    - one learner task at a time (``learner_task_space``); its replay buffer and policy file are named
      after it and every collector task of that learner writes there;
    - up to ``collector_task_space`` collector tasks at once, with collect settings (e.g. epsilon) from
      the policy's command mode, given the learner's latest iteration and the env steps so far;
    - an evaluation task (``eval_flag``) at most every ``eval_interval`` seconds, one at a time;
    - ``finish_collector_task`` returns True (end of run) when an evaluation's ``reward_mean`` reaches
      ``env.stop_value``.
    """

    config = dict(
        collector_task_space=1,
        learner_task_space=1,
        # seconds between the start of two evaluation tasks
        eval_interval=60.0,
    )

    def __init__(self, cfg: EasyDict) -> None:
        self._cfg = cfg
        commander_cfg = cfg.policy.other.commander
        self._commander_cfg = commander_cfg
        self._collector_task_space = TaskSpace(0, int(commander_cfg.collector_task_space))
        self._learner_task_space = TaskSpace(0, int(commander_cfg.learner_task_space))
        self._eval_interval = float(commander_cfg.eval_interval)
        self._stop_value = cfg.env.get('stop_value', None)
        self._policy = command_policy(cfg)

        self._learner_info: dict[str, Any] = {'learner_step': 0}
        self._total_collector_env_step = 0
        self._collector_task_count = 0
        self._current_learner_task_id: str | None = None
        self._current_buffer_id: str | None = None
        self._current_policy_name: str | None = None
        self._last_eval_time = 0.0
        self._eval_running: str | None = None  # task_id of the running evaluation
        self._eval_history: list[dict[str, Any]] = []
        self.best_eval_return = float('-inf')
        self.last_eval_return: float | None = None
        self._end_flag = False
        self._logger: Any = None  # built on first use: a commander that never logs leaves no files
        self._tb_logger: Any = None

    # ---- logging ---------------------------------------------------------------------------------
    def _log(self) -> Any:
        if self._logger is None:
            # No tensorboard writer here: tensorboardX imports torch, which the coordinator process never loads
            # (its memory and start-up stay small); the task results are in this text log.
            self._logger, self._tb_logger = build_logger(
                f'./{self._cfg.exp_name}/log/commander', 'commander', need_tb=False, to_console=False
            )
        return self._logger

    # ---- tasks -----------------------------------------------------------------------------------
    def get_learner_task(self) -> dict | None:
        if self._end_flag or not self._learner_task_space.acquire_space():
            return None
        task_id = f'learner_task_{get_task_uid()}'
        self._current_learner_task_id = task_id
        self._current_buffer_id = f'buffer_{task_id}'
        self._current_policy_name = f'policy_{task_id}'
        self._learner_info = {'learner_step': 0}
        # The first evaluation comes one interval after training starts, not on the untrained policy.
        self._last_eval_time = time.time()
        return make_learner_task(self._cfg, task_id, self._current_buffer_id, self._current_policy_name)

    def get_collector_task(self) -> dict | None:
        buffer_id, policy_name, learner_task_id = (
            self._current_buffer_id,
            self._current_policy_name,
            self._current_learner_task_id,
        )
        if self._end_flag or buffer_id is None or policy_name is None or learner_task_id is None:
            return None
        if not self._collector_task_space.acquire_space():
            return None
        now = time.time()
        eval_flag = self._eval_running is None and now - self._last_eval_time >= self._eval_interval
        task_id = f'{"evaluator" if eval_flag else "collector"}_task_{get_task_uid()}'
        if eval_flag:
            self._last_eval_time = now
            self._eval_running = task_id
            policy_kwargs: dict[str, Any] = {}
        else:
            info = command_info(int(self._learner_info.get('learner_step', 0)), self._total_collector_env_step)
            policy_kwargs = dict(self._policy.get_setting_collect(info))
        self._collector_task_count += 1
        return make_collector_task(
            self._cfg, task_id, buffer_id, policy_name, learner_task_id, eval_flag, policy_kwargs
        )

    # ---- results ---------------------------------------------------------------------------------
    def finish_collector_task(self, task_id: str, finished_task: dict) -> bool:
        self._collector_task_space.release_space()
        eval_flag = bool(finished_task.get('eval_flag', False))
        kind = 'evaluator' if eval_flag else 'collector'
        train_iter = int(finished_task.get('policy_iter', self._learner_info.get('learner_step', 0)))
        if eval_flag:
            if self._eval_running == task_id:
                self._eval_running = None
        else:
            self._total_collector_env_step += int(finished_task.get('step_count', 0))
        numbers = {k: v for k, v in finished_task.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        logger = self._log()
        logger.info(f'[{kind.upper()}] task {task_id} ends: ' + ', '.join(f'{k}={v}' for k, v in numbers.items()))
        if self._tb_logger is not None:
            for k, v in numbers.items():
                if k != 'policy_iter':
                    self._tb_logger.add_scalar(f'{kind}_iter/{k}', v, train_iter)
                    self._tb_logger.add_scalar(f'{kind}_step/{k}', v, self._total_collector_env_step)
        if not eval_flag:
            return False
        reward_mean = float(finished_task.get('reward_mean', float('-inf')))
        self.last_eval_return = reward_mean
        self.best_eval_return = max(self.best_eval_return, reward_mean)
        self._eval_history.append(
            {
                'task_id': task_id,
                'reward_mean': reward_mean,
                'policy_iter': train_iter,
                'envstep': self._total_collector_env_step,
                'time': time.time(),
            }
        )
        if self._stop_value is not None and reward_mean >= self._stop_value:
            self._end_reason = f'evaluation return {reward_mean} reached the stop value {self._stop_value}'
            logger.info(self._end_reason + ': the run ends')
            self._solved = True
            self._end_flag = True
            return True
        return False

    def finish_learner_task(self, task_id: str, finished_task: dict) -> str | None:
        self._learner_task_space.release_space()
        buffer_id = finished_task.get('buffer_id', self._current_buffer_id)
        if task_id == self._current_learner_task_id:
            self._current_learner_task_id = None
            self._current_buffer_id = None
            self._current_policy_name = None
            self._learner_info = {'learner_step': 0}
        return buffer_id

    def notify_fail_collector_task(self, task: dict) -> None:
        self._collector_task_space.release_space()
        if task.get('task_id') == self._eval_running:
            self._eval_running = None

    def notify_fail_learner_task(self, task: dict) -> None:
        self.finish_learner_task(task.get('task_id', ''), task)

    def update_learner_info(self, task_id: str, info: dict) -> None:
        # Only the newest info matters to the collect settings; keeping all of them would grow forever.
        if task_id == self._current_learner_task_id:
            self._learner_info = info

    # ---- state -----------------------------------------------------------------------------------
    @property
    def total_collector_env_step(self) -> int:
        return self._total_collector_env_step

    def state_dict(self) -> dict[str, Any]:
        """The counters a resumed run continues from (the env steps drive the collect settings, e.g. epsilon)."""
        best = self.best_eval_return
        return {
            'total_collector_env_step': self._total_collector_env_step,
            'best_eval_return': best if best > float('-inf') else None,
        }  # JSON has no -inf

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._total_collector_env_step = int(state.get('total_collector_env_step') or 0)
        best = state.get('best_eval_return')
        self.best_eval_return = float(best) if best is not None else float('-inf')

    @property
    def learner_step(self) -> int:
        return int(self._learner_info.get('learner_step', 0))

    @property
    def eval_history(self) -> list[dict[str, Any]]:
        return list(self._eval_history)

    def close(self) -> None:
        if self._logger is not None:
            close_logger(self._logger)
            self._logger = None
        if self._tb_logger is not None:
            self._tb_logger.close()
            self._tb_logger = None
