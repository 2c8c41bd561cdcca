"""Evaluate the greedy (eval-mode) policy on a fixed set of episodes, keep the best checkpoint, decide when to stop."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from easydict import EasyDict

from ding.utils.log_helper import pretty_table
from ding.utils.registry import SERIAL_EVALUATOR_REGISTRY, import_module

from .base_serial_collector import SerialWorkerMixin, episode_return_of


@SERIAL_EVALUATOR_REGISTRY.register('interaction')
class InteractionSerialEvaluator(SerialWorkerMixin):
    """Runs ``n_episode`` episodes with ``policy.eval_mode`` on an env manager.

    The envs are reset before each evaluation (seed the evaluator envs with ``dynamic_seed=False``
    and every evaluation replays the same episodes). The episodes are split between the envs up front
    (env ``i`` plays ``n_episode // env_num`` episodes, the first ``n_episode % env_num`` envs one
    more), and an env that played its share is no longer stepped, so which episodes are evaluated does
    not depend on timing. Episodes interrupted by an abnormal timestep (env crash) are not counted.
    """

    config = dict(
        type='interaction',
        # Evaluate every ``eval_freq`` training iterations (see ``should_eval``).
        eval_freq=1000,
        # ``render_freq`` > 0: ask the env manager to save replays every that many ``mode`` units
        # ('train_iter' or 'envstep'); needs an env manager with ``enable_save_replay``.
        render=dict(render_freq=-1, mode='train_iter'),
        n_episode=5,
        stop_value=np.inf,
    )

    _policy_mode = 'eval'

    def __init__(
        self,
        cfg: dict | None = None,
        env: Any | None = None,
        policy: Any | None = None,
        tb_logger: Any | None = None,
        exp_name: str = 'default_experiment',
        instance_name: str = 'evaluator',
    ) -> None:
        self._init_worker(cfg, tb_logger, exp_name, instance_name)
        self._default_n_episode = self._cfg.n_episode
        self._stop_value = self._cfg.stop_value
        render = self._cfg.get('render', {}) or {}
        self._render_freq = render.get('render_freq', -1)
        self._render_mode = render.get('mode', 'train_iter')
        if self._render_mode not in ('train_iter', 'envstep'):
            raise ValueError(
                f"evaluator config render.mode must be 'train_iter' or 'envstep', got {self._render_mode!r}"
            )
        self._last_render_iter = -1
        self._last_render_step = -1
        self.reset(policy, env)

    # ---- set-up --------------------------------------------------------------------------------
    def reset_env(self, _env: Any | None = None) -> None:
        if _env is not None:
            self._attach_env(_env)
        elif self._env is not None:
            self._env.reset()

    def reset_policy(self, _policy: Any | None = None) -> None:
        if _policy is not None:
            self._attach_policy(_policy)
        elif self._policy is not None:
            self._policy.reset()

    def reset(self, _policy: Any | None = None, _env: Any | None = None) -> None:
        """Attach what is given and forget the evaluation history (best return, last eval iteration)."""
        if _env is not None:
            self.reset_env(_env)
        if _policy is not None:
            self.reset_policy(_policy)
        self._max_episode_return = float('-inf')
        self._last_eval_iter = -1

    @property
    def best_return(self) -> float:
        """The best mean evaluation return so far (``-inf`` before the first evaluation)."""
        return self._max_episode_return

    @best_return.setter
    def best_return(self, value: float) -> None:
        """Restored on resume, so the first evaluation afterwards cannot replace ``ckpt_best`` with a worse policy."""
        self._max_episode_return = float(value)

    # ---- scheduling ----------------------------------------------------------------------------
    def should_eval(self, train_iter: int) -> bool:
        """True at the first call (iteration 0 included), then once ``eval_freq`` iterations have passed;
        never twice for the same ``train_iter``."""
        if train_iter == self._last_eval_iter:
            return False
        if (train_iter - self._last_eval_iter) < self._cfg.eval_freq and train_iter != 0:
            return False
        self._last_eval_iter = train_iter
        return True

    def _should_render(self, envstep: int, train_iter: int) -> bool:
        if self._render_freq <= 0:
            return False
        if self._render_mode == 'envstep':
            if envstep - self._last_render_step >= self._render_freq:
                self._last_render_step = envstep
                return True
        elif train_iter - self._last_render_iter >= self._render_freq:
            self._last_render_iter = train_iter
            return True
        return False

    # ---- evaluation ----------------------------------------------------------------------------
    def eval(
        self,
        save_ckpt_fn: Callable[[str], Any] | None = None,
        train_iter: int = -1,
        envstep: int = -1,
        n_episode: int | None = None,
        force_render: bool = False,
        policy_kwargs: dict | None = None,
    ) -> tuple[bool, dict[str, Any]]:
        """Play ``n_episode`` episodes; return ``(stop_flag, episode_info)``.

        ``episode_info`` holds ``eval_episode_return`` (one float per episode, grouped by env) and its
        ``_mean/_std/_max/_min``, plus the mean of every number in ``info['episode_info']`` dicts that
        envs report. A new best mean return calls ``save_ckpt_fn('ckpt_best')``. ``stop_flag`` is
        ``mean return >= stop_value``.
        """
        if self._env is None or self._policy is None:
            raise RuntimeError('InteractionSerialEvaluator.eval: attach an env and a policy first (reset(policy, env))')
        n_episode = self._default_n_episode if n_episode is None else n_episode
        if not n_episode or n_episode <= 0:
            raise ValueError(f'InteractionSerialEvaluator.eval: n_episode must be positive, got {n_episode}')
        env, policy = self._env, self._policy
        if force_render or self._should_render(envstep, train_iter):
            self._enable_render(train_iter)  # before the reset: the videos start with the episodes
        env.reset()
        policy.reset()
        env_num = env.env_num
        remaining = {i: n_episode // env_num + (1 if i < n_episode % env_num else 0) for i in range(env_num)}
        returns: dict[int, list[float]] = {i: [] for i in range(env_num)}
        extra: dict[str, list[float]] = {}
        envstep_count = 0
        kwargs = policy_kwargs or {}
        start = time.perf_counter()
        with torch.no_grad():
            while any(remaining.values()):
                obs = {i: o for i, o in env.ready_obs.items() if remaining.get(i, 0) > 0}
                if not obs and env.in_flight:  # an as-ready env manager: the envs that owe episodes are stepping
                    timesteps = env.step({})
                elif not obs:
                    raise RuntimeError(
                        f'InteractionSerialEvaluator: {sum(remaining.values())} episodes still to play but no env '
                        f"that owes one is ready (is the env manager's episode_num smaller than n_episode/env_num?)"
                    )
                else:
                    output = policy.forward(obs, **kwargs) if kwargs else policy.forward(obs)
                    timesteps = env.step({i: out['action'] for i, out in output.items()})
                for env_id, timestep in timesteps.items():
                    info = timestep.info
                    if info.get('abnormal', False):
                        policy.reset([env_id])
                        continue
                    envstep_count += 1
                    if not timestep.done:
                        continue
                    policy.reset([env_id])
                    ret = episode_return_of(info)
                    if ret is None:
                        raise KeyError(
                            f'InteractionSerialEvaluator: env {env_id} ended an episode without '
                            f"info['eval_episode_return'] (got info keys {list(info)})"
                        )
                    returns[env_id].append(ret)
                    remaining[env_id] -= 1
                    for k, v in (info.get('episode_info') or {}).items():
                        if isinstance(v, (int, float, np.bool_, np.integer, np.floating)):  # numeric scalars only
                            extra.setdefault(k, []).append(float(v))
                    self._logger.info(
                        f'[{self._instance_name}] env {env_id} finished an episode: return {ret:.4f}, '
                        f'{n_episode - sum(remaining.values())}/{n_episode} episodes done'
                    )
        duration = time.perf_counter() - start
        episode_return = [r for i in range(env_num) for r in returns[i]]
        mean_return = float(np.mean(episode_return))
        table = {
            'train_iter': train_iter,
            'ckpt_name': f'iteration_{train_iter}',
            'envstep': envstep,
            'episode_count': n_episode,
            'envstep_count': envstep_count,
            'avg_envstep_per_episode': envstep_count / n_episode,
            'evaluate_time': duration,
            'avg_envstep_per_sec': envstep_count / max(duration, 1e-9),
            'avg_time_per_episode': duration / n_episode,
            'reward_mean': mean_return,
            'reward_std': float(np.std(episode_return)),
            'reward_max': float(np.max(episode_return)),
            'reward_min': float(np.min(episode_return)),
        }
        self._logger.info(pretty_table(table, f'[{self._instance_name}] evaluation at train_iter {train_iter}'))
        scalars = {k: v for k, v in table.items() if k not in ('train_iter', 'ckpt_name', 'envstep')}
        self._log_scalars(scalars, train_iter, envstep)
        if mean_return > self._max_episode_return:
            self._max_episode_return = mean_return  # first: ckpt_best records the return that made it the best
            if save_ckpt_fn is not None:
                save_ckpt_fn('ckpt_best')
        stop_flag = bool(mean_return >= self._stop_value)
        if stop_flag:
            self._logger.info(
                f'[{self._instance_name}] mean evaluation return {mean_return:.4f} >= stop_value '
                f'{self._stop_value}: the task is solved, training can stop '
                f'(details in {self._log_path})'
            )
        episode_info: dict[str, Any] = {
            'eval_episode_return': episode_return,
            'eval_episode_return_mean': mean_return,
            'eval_episode_return_std': table['reward_std'],
            'eval_episode_return_max': table['reward_max'],
            'eval_episode_return_min': table['reward_min'],
        }
        for k, v in extra.items():
            episode_info[f'{k}_mean'] = float(np.mean(v))
        return stop_flag, episode_info

    def _enable_render(self, train_iter: int) -> None:
        path = os.path.join('.', self._exp_name, 'videos', f'iteration_{train_iter}')
        if hasattr(self._env, 'enable_save_replay'):
            self._env.enable_save_replay(path)
            self._logger.info(f'[{self._instance_name}] episodes from now on are saved as videos in {path}')
        else:
            self._logger.warning(
                f'[{self._instance_name}] rendering asked for, but {type(self._env).__name__} has no enable_save_replay'
            )

    def close(self) -> None:
        """Close the env manager and the loggers this evaluator opened; safe to call twice."""
        self._close_worker()


def get_serial_evaluator_cls(cfg: dict) -> Callable[..., Any]:
    import_module(cfg.get('import_names', []))
    return SERIAL_EVALUATOR_REGISTRY.get_cls(cfg.get('type', 'interaction'))


def create_serial_evaluator(cfg: dict, **kwargs: Any) -> InteractionSerialEvaluator:
    """``create_serial_evaluator(cfg.policy.eval.evaluator, env=.., policy=.., tb_logger=.., exp_name=..)``;
    ``cfg.type`` defaults to 'interaction'."""
    cfg = EasyDict(cfg)
    return get_serial_evaluator_cls(cfg)(cfg=cfg, **kwargs)
