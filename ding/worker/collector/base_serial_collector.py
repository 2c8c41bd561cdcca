"""The serial collector interface, the bookkeeping shared by serial collectors/evaluators, and the factory."""

from __future__ import annotations

import copy
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
from easydict import EasyDict

from ding.utils.log_helper import build_logger, build_summary_writer, close_logger
from ding.utils.registry import SERIAL_COLLECTOR_REGISTRY, import_module


def _merge(base: dict, update: dict | None) -> EasyDict:
    merged = copy.deepcopy(dict(base))
    for k, v in (update or {}).items():
        if isinstance(v, dict) and isinstance(merged.get(k), dict):
            merged[k] = _merge(merged[k], v)
        else:
            merged[k] = v
    return EasyDict(merged)


class ISerialCollector(ABC):
    """What the serial pipelines need from a collector."""

    config: dict[str, Any] = {}

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    @abstractmethod
    def reset_env(self, _env: Any | None = None) -> None: ...

    @abstractmethod
    def reset_policy(self, _policy: Any | None = None) -> None: ...

    @abstractmethod
    def reset(self, _policy: Any | None = None, _env: Any | None = None) -> None: ...

    @abstractmethod
    def collect(self, *args: Any, **kwargs: Any) -> list[Any]: ...

    @property
    @abstractmethod
    def envstep(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...


class SerialWorkerMixin:
    """Config merging, loggers and the env/policy hand-over shared by serial collectors and the evaluator.

    ``_policy_mode`` names the policy view this worker drives ('collect' or 'eval'): a full ``Policy``
    passed in is narrowed to that view; a view (``policy.collect_mode``) is used as is.
    """

    _policy_mode = 'collect'
    config: dict[str, Any] = {}

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def _init_worker(self, cfg: dict | None, tb_logger: Any | None, exp_name: str, instance_name: str) -> None:
        self._cfg = _merge(self.default_config(), cfg)
        self._exp_name = exp_name
        self._instance_name = instance_name
        # os.path.join keeps an absolute exp_name absolute
        self._log_path = os.path.join('.', exp_name, 'log', instance_name)
        self._logger, _ = build_logger(self._log_path, instance_name, need_tb=False)
        # Without a shared writer, one of our own is made on first use (no empty event files).
        self._tb_logger, self._own_tb = tb_logger, tb_logger is None
        self._env: Any = None
        self._policy: Any = None
        self._env_num = 0
        self._end_flag = False

    def _attach_env(self, env: Any) -> None:
        for name in ('launch', 'ready_obs', 'step', 'reset', 'env_num'):
            if not hasattr(type(env), name) and not hasattr(env, name):
                raise TypeError(
                    f"{type(self).__name__}: env must be an env manager with '{name}', got {type(env).__name__}"
                )
        self._env = env
        self._env.launch()
        self._env_num = self._env.env_num

    def _attach_policy(self, policy: Any) -> None:
        if not hasattr(policy, 'forward'):
            if not hasattr(policy, f'{self._policy_mode}_mode'):
                raise TypeError(
                    f'{type(self).__name__}: policy must be a Policy or its {self._policy_mode}_mode, '
                    f'got {type(policy).__name__}'
                )
            policy = getattr(policy, f'{self._policy_mode}_mode')
        self._policy = policy
        self._policy.reset()

    def _policy_attr(self, name: str, default: Any = None) -> Any:
        try:
            return self._policy.get_attribute(name)
        except (AttributeError, KeyError):
            return default

    def _log_scalars(self, info: dict[str, Any], train_iter: int, envstep: int, skip_step: tuple = ()) -> None:
        """``{instance}_iter/k`` against ``train_iter`` and ``{instance}_step/k`` against ``envstep``."""
        if self._tb_logger is None:
            if not self._own_tb or self._end_flag:
                return
            self._tb_logger = build_summary_writer(os.path.join(self._log_path, self._instance_name))
        for k, v in info.items():
            if not np.isscalar(v) or isinstance(v, str):
                continue
            self._tb_logger.add_scalar(f'{self._instance_name}_iter/{k}', v, train_iter)
            if k not in skip_step:
                self._tb_logger.add_scalar(f'{self._instance_name}_step/{k}', v, envstep)

    def _reset_collect_stats(self) -> None:
        self._episode_info: list[dict[str, float]] = []
        self._log_steps = 0
        self._log_samples = 0
        self._log_time = 0.0
        self._last_train_iter = 0
        self._total_envstep_count = 0
        self._total_train_sample_count = 0
        self._total_episode_count = 0

    def _output_log(self, train_iter: int) -> None:
        """Report the episodes finished since the last report once ``train_iter`` advanced by
        ``collect_print_freq`` (DI-engine's rule), to the text log and tensorboard."""
        if train_iter - self._last_train_iter < self._cfg.collect_print_freq or not self._episode_info:
            return
        self._last_train_iter = train_iter
        info = collect_stats(self._episode_info, self._log_time, self._log_steps, self._log_samples)
        info.update(
            total_envstep_count=self._total_envstep_count,
            total_train_sample_count=self._total_train_sample_count,
            total_episode_count=self._total_episode_count,
        )
        self._episode_info.clear()
        self._log_steps = self._log_samples = 0
        self._log_time = 0.0
        self._logger.info(
            f'[{self._instance_name}] train_iter {train_iter}, collect summary:\n'
            + '\n'.join(f'{k}: {v:.4g}' if isinstance(v, float) else f'{k}: {v}' for k, v in info.items())
        )
        self._log_scalars(info, train_iter, self._total_envstep_count, skip_step=('total_envstep_count',))

    def _close_worker(self) -> None:
        if self._end_flag:
            return
        self._end_flag = True
        if self._env is not None:
            self._env.close()
        if self._tb_logger is not None:
            self._tb_logger.flush()
            if self._own_tb:
                self._tb_logger.close()
        close_logger(self._logger)


class BaseSerialCollector(SerialWorkerMixin, ISerialCollector):
    """What the sample and episode collectors share: ``reset`` and the ``envstep`` counter."""

    def reset(self, _policy: Any | None = None, _env: Any | None = None) -> None:
        """Attach what is given, reset both sides and zero every counter."""
        if _env is not None:
            self.reset_env(_env)
        if _policy is not None:
            self.reset_policy(_policy)
        self._clear_trajectories()
        self._reset_collect_stats()

    def _clear_trajectories(self) -> None:
        raise NotImplementedError

    @property
    def envstep(self) -> int:
        """Env steps taken since the last ``reset`` (abnormal steps excluded)."""
        return self._total_envstep_count

    @envstep.setter
    def envstep(self, value: int) -> None:
        self._total_envstep_count = value


def episode_return_of(info: dict[str, Any]) -> float | None:
    """``info['eval_episode_return']`` as a float (it may be a float, a 1-element array or tensor)."""
    value = info.get('eval_episode_return')
    if value is None:
        return None
    if hasattr(value, 'reshape'):  # numpy array or torch tensor of one element
        return float(value.reshape(-1)[0])
    return float(value)


def collect_stats(episodes: list[dict[str, float]], duration: float, envstep: int, train_sample: int) -> dict[str, Any]:
    """Summary of the episodes finished since the last report (each ``{'return', 'step', 'train_sample'}``)."""
    n = len(episodes)
    returns = [e['return'] for e in episodes]
    duration = max(duration, 1e-9)
    return {
        'episode_count': n,
        'envstep_count': envstep,
        'train_sample_count': train_sample,
        'avg_envstep_per_episode': sum(e['step'] for e in episodes) / n,
        'avg_sample_per_episode': sum(e['train_sample'] for e in episodes) / n,
        'avg_envstep_per_sec': envstep / duration,
        'avg_train_sample_per_sec': train_sample / duration,
        'avg_episode_per_sec': n / duration,
        'reward_mean': float(np.mean(returns)),
        'reward_std': float(np.std(returns)),
        'reward_max': float(np.max(returns)),
        'reward_min': float(np.min(returns)),
    }


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def get_serial_collector_cls(cfg: dict) -> Callable[..., Any]:
    """The collector class named by ``cfg.type`` (after importing ``cfg.import_names``)."""
    import_module(cfg.get('import_names', []))
    if 'type' not in cfg:
        raise KeyError(f"collector config needs a 'type' (one of {SERIAL_COLLECTOR_REGISTRY.query()})")
    return SERIAL_COLLECTOR_REGISTRY.get_cls(cfg['type'])


def create_serial_collector(cfg: dict, **kwargs: Any) -> ISerialCollector:
    """``create_serial_collector(cfg.policy.collect.collector, env=.., policy=.., tb_logger=.., exp_name=..)``."""
    cfg = EasyDict(cfg)
    return get_serial_collector_cls(cfg)(cfg=cfg, **kwargs)


__all__ = [
    'ISerialCollector',
    'SerialWorkerMixin',
    'create_serial_collector',
    'get_serial_collector_cls',
    'episode_return_of',
    'collect_stats',
    'ceil_div',
]
