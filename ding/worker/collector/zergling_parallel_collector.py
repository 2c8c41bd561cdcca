"""The ``zergling`` parallel collector: DI-engine's default collector of the parallel pipeline.

A collect task steps the collector envs with the serial ``SampleSerialCollector`` (one batched policy
forward per step, per-env trajectories, ``get_train_sample``) one ``policy.collect.n_sample`` call at a
time; between calls it looks for newer weights and writes the samples gathered so far as one data file
once there are ``chunk_size`` of them (or ``chunk_second`` passed). It ends after ``n_sample`` training
samples or ``episode_num`` finished episodes, whichever comes first.

A collect task goes on with the envs (and policy, and partial trajectories) of the comm collector's previous
collect task when their configuration is the same (``keep_envs``, see ``ding.worker.collector.kept_resources``):
episodes then run across tasks instead of restarting every ``n_sample`` samples. The new task's ``seed`` is
used only when envs are built.

An evaluation task (``eval_flag``) loads the newest weights once and plays ``n_episode`` greedy episodes
on the evaluator envs with the serial ``InteractionSerialEvaluator``.
"""

from __future__ import annotations

import copy
import json
import time
from functools import partial
from typing import Any

from easydict import EasyDict

from ding.envs import create_env_manager, get_vec_env_setting
from ding.policy import create_policy
from ding.utils.registry import PARALLEL_COLLECTOR_REGISTRY

from .base_parallel_collector import BaseParallelCollector
from .interaction_serial_evaluator import InteractionSerialEvaluator
from .sample_serial_collector import SampleSerialCollector
from .task_threads import EnvStepObserver


class _CollectResources:
    """A collect task's envs, policy and serial collector, kept for the next task (``KeptResources``)."""

    def __init__(self, manager: Any, env: EnvStepObserver, policy: Any, worker: Any, policy_iter: int) -> None:
        self.manager, self.env, self.policy, self.worker, self.policy_iter = manager, env, policy, worker, policy_iter

    def close(self) -> None:
        self.worker.close()  # closes the env manager too


class _NullWriter:
    """Tensorboard stand-in for the serial workers inside a task: the coordinator's commander already
    logs every task's finish info to tensorboard, and one event file per task would pile up."""

    def add_scalar(self, *args: Any, **kwargs: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _positive_int_or_none(cfg: EasyDict, key: str, who: str) -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1 or value != int(value):
        raise ValueError(f"{who}: collector config '{key}' must be a positive integer or None, got {value!r}")
    return int(value)


@PARALLEL_COLLECTOR_REGISTRY.register('zergling')
class ZerglingParallelCollector(BaseParallelCollector):
    """Collect (or evaluate) with the policy the learner publishes; see the module docstring.

    Built from the task config assembled by the comm collector (see ``BaseParallelCollector``): the env
    manager is ``create_env_manager(env.manager, ...)`` over the collector (or evaluator) env configs of
    ``get_vec_env_setting(env)``, the policy ``create_policy(policy, enable_field=['collect', 'eval'])``.
    Collector envs are seeded ``seed`` (dynamic seeds); evaluator envs ``seed`` without dynamic seeds, so
    every evaluation of a collector replays the same episodes, like the serial evaluator.
    """

    uses_kept_resources = True  # the comm collector passes ``kept``

    config = dict(
        type='zergling',
        # seconds between two looks at the policy file for newer weights
        update_policy_second=3.0,
        # where the weights come from: 'fs' (the policy file in path_policy) or 'http' (the learner's
        # GET /weights/current; no shared directory needed for weights)
        policy_transport='fs',
        # 'host:port' of the learner's run service for 'http'; None: the one the coordinator passes
        weights_address=None,
        # with 'http': 'poll' GET /weights/current every update_policy_second, or 'subscribe' to the learner's
        # /weights/stream and fetch when it announces a version
        weights_refresh='poll',
        # budget of one collect task: it ends after n_sample training samples or episode_num finished
        # episodes, whichever comes first (None: no limit of that kind; at least one must be set)
        n_sample=1024,
        episode_num=None,
        # a data file (and a data answer) holds the samples of at least chunk_size samples, or of
        # chunk_second seconds of collection when that comes first
        chunk_size=64,
        chunk_second=2.0,
        # episodes of an evaluation task (None: policy.eval.evaluator.n_episode)
        n_episode=None,
        # passed to the serial collector
        deepcopy_obs=False,
        transform_obs=False,
        collect_print_freq=100,
        # a collect task goes on with the envs of the previous one (same env/policy config): episodes are
        # not cut every n_sample samples
        keep_envs=True,
    )

    def __init__(self, cfg: dict[str, Any], logger: Any | None = None, kept: Any | None = None) -> None:
        super().__init__(cfg, logger)
        cfg = self._cfg
        who = f'parallel collector {self._instance_name}'
        for key in ('env', 'policy'):
            if not isinstance(cfg.get(key), dict):
                raise KeyError(f"{who}: the task config needs the '{key}' config (a dict), got {cfg.get(key)!r}")
        self._n_sample = _positive_int_or_none(cfg, 'n_sample', who)
        self._episode_num = _positive_int_or_none(cfg, 'episode_num', who)
        if not self._eval_flag and self._n_sample is None and self._episode_num is None:
            raise ValueError(
                f"{who}: a collect task needs a budget: set the collector config's 'n_sample' or 'episode_num'"
            )
        self._chunk_size = _positive_int_or_none(cfg, 'chunk_size', who) or 1
        self._chunk_second = float(cfg['chunk_second']) if cfg.get('chunk_second') is not None else float('inf')
        self._policy_kwargs = dict(cfg.get('policy_kwargs') or cfg.get('collect_setting') or {})
        self._seed = int(cfg.get('seed') or 0)
        self._worker: Any = None  # the serial collector or evaluator
        self._manager: Any = None
        keep = not self._eval_flag and kept is not None and self._cfg.get('keep_envs', True)
        self._kept = kept if keep else None
        self._kept_key = self._resources_key() if keep else ''
        try:
            self._setup()
        except BaseException:
            self._release()  # envs launched so far, and the logger if this collector built it
            raise

    # ---- set-up --------------------------------------------------------------------------------------------
    def _resources_key(self) -> str:
        """What kept resources must have been built from to serve this task."""
        cfg = self._cfg
        what = {
            k: cfg.get(k)
            for k in (
                'env',
                'policy',
                'exp_name',
                'instance_name',
                'deepcopy_obs',
                'transform_obs',
                'collect_print_freq',
            )
        }
        return json.dumps(what, sort_keys=True, default=repr)

    def _setup(self) -> None:
        self._unroll_len = int(self._cfg.policy.get('collect', {}).get('unroll_len', 1) or 1)
        kept = self._kept.take(self._kept_key) if self._kept is not None else None
        if kept is not None:
            kept.env.rebind(self._stop_event)
            self._manager, self._env, self._policy, self._worker = kept.manager, kept.env, kept.policy, kept.worker
            self._policy_iter = kept.policy_iter
            return
        cfg = self._cfg
        env_cfg = EasyDict(copy.deepcopy(dict(cfg.env)))
        env_fn, collector_env_cfg, evaluator_env_cfg = get_vec_env_setting(
            env_cfg, collect=not self._eval_flag, eval_=self._eval_flag
        )
        env_cfgs = (
            evaluator_env_cfg if self._eval_flag else collector_env_cfg
        ) or []  # only the asked-for side is built
        manager_cfg = dict(env_cfg.get('manager') or {})
        # The task's budget decides when it ends; an env that stops after episode_num episodes would leave
        # the serial collector with no ready env.
        manager_cfg['episode_num'] = float('inf')
        self._manager = create_env_manager(manager_cfg, [partial(env_fn, cfg=c) for c in env_cfgs])
        self._manager.seed(self._seed, dynamic_seed=not self._eval_flag)
        self._env = env = EnvStepObserver(self._manager, self._stop_event)

        policy = create_policy(EasyDict(copy.deepcopy(dict(cfg.policy))), enable_field=['collect', 'eval'])
        self._policy = policy.eval_mode if self._eval_flag else policy.collect_mode

        common: dict[str, Any] = dict(exp_name=self._exp_name, tb_logger=_NullWriter())
        if self._eval_flag:
            eval_cfg = dict((cfg.policy.get('eval') or {}).get('evaluator') or {})
            eval_cfg.pop('type', None)
            eval_cfg.pop('import_names', None)
            if cfg.get('n_episode') is not None:
                eval_cfg['n_episode'] = cfg.n_episode
            self._worker = InteractionSerialEvaluator(
                eval_cfg, env=env, policy=self._policy, instance_name=f'{self._instance_name}_evaluator', **common
            )
        else:
            serial_cfg = {k: cfg[k] for k in ('deepcopy_obs', 'transform_obs', 'collect_print_freq')}
            self._worker = SampleSerialCollector(
                serial_cfg, env=env, policy=self._policy, instance_name=self._instance_name, **common
            )

    def _close_resources(self) -> None:
        if self._kept is not None and self._worker is not None and self._env is not None and self._error is None:
            # a clean end (budget spent, or stopped between env steps): the envs are consistent
            self._kept.keep(
                self._kept_key,
                _CollectResources(self._manager, self._env, self._policy, self._worker, self._policy_iter),
            )
            self._worker = self._manager = None
            return
        if self._worker is not None:
            self._worker.close()  # closes the env manager too
            self._worker = None
        elif self._manager is not None:
            self._manager.close()
        self._manager = None

    # ---- the task ------------------------------------------------------------------------------------------
    def _run(self) -> None:
        self._update_policy(force=True)
        if self._eval_flag:
            self._run_eval()
        else:
            self._run_collect()

    def _run_eval(self) -> None:
        _, episode_info = self._worker.eval(train_iter=self._policy_iter)
        self._logger.info(
            f'{self._prefix} evaluated policy_iter {self._policy_iter}: reward_mean '
            f'{episode_info["eval_episode_return_mean"]:.4g} over '
            f'{len(episode_info["eval_episode_return"])} episodes'
        )

    def _run_collect(self) -> None:
        collector, env, stop = self._worker, self._built_env(), self._stop_event
        kwargs = self._policy_kwargs
        n_sample, episode_num = self._n_sample, self._episode_num
        pending: list[dict[str, Any]] = []
        last_send = time.monotonic()
        while not stop.is_set():
            self._update_policy()
            pending.extend(collector.collect(train_iter=self._policy_iter, policy_kwargs=kwargs, drop_extra=False))
            total = self._produced_count + len(pending)
            done = (n_sample is not None and total >= n_sample) or (
                episode_num is not None and env.episode_count >= episode_num
            )
            now = time.monotonic()
            if done or len(pending) >= self._chunk_size or now - last_send >= self._chunk_second:
                self._send_samples(pending, self._unroll_len)
                pending = []
                last_send = now
            if done:
                break
        self._logger.info(
            f'{self._prefix} collected {self._produced_count} samples in {env.step_count} env steps '
            f'and {env.episode_count} episodes'
        )

    def _built_env(self) -> EnvStepObserver:
        if self._env is None:
            raise RuntimeError(f'{self._prefix} the env manager is not built yet')
        return self._env

    def get_finish_info(self) -> dict[str, Any]:
        info = super().get_finish_info()
        info['env_num'] = self._env.env_num if self._env is not None else 0
        if not self._eval_flag:
            info['collect_setting'] = dict(self._policy_kwargs)
        return info

    def __repr__(self) -> str:
        return f'ZerglingParallelCollector(task_id={self._task_id!r}, eval_flag={self._eval_flag})'


__all__ = ['ZerglingParallelCollector']
