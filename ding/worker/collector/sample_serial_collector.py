"""Collect a given number of training samples from a vectorised env with one batched policy forward per step."""

from __future__ import annotations

import copy
import time
from typing import Any

import torch

from ding.utils.registry import SERIAL_COLLECTOR_REGISTRY

from .base_serial_collector import BaseSerialCollector, ceil_div, episode_return_of


@SERIAL_COLLECTOR_REGISTRY.register('sample')
class SampleSerialCollector(BaseSerialCollector):
    """Steps every ready env with ``policy.forward({env_id: obs}, **policy_kwargs)`` until ``n_sample``
    training samples are made.

    Each env keeps its own trajectory buffer of ``policy.process_transition(obs, output, timestep)``
    dicts (plus ``collect_iter`` and ``env_id``). A trajectory becomes training samples through
    ``policy.get_train_sample(traj)`` when its episode ends or when it reaches ``traj_len`` transitions:
    ``traj_len = max(unroll_len, ceil(n_sample / env_num))`` (infinite when the policy config sets
    ``traj_len_inf``, at its top level or in ``collect``, or no default ``n_sample`` is known). A cut trajectory's last transition has
    ``done=False``, which tells the policy to bootstrap from ``next_obs``.

    On-policy policies (``policy.get_attribute('on_policy')``) never carry transitions over to the
    next ``collect`` call, as the next call runs a newer policy: when ``n_sample`` is reached every
    non-empty per-env trajectory is cut and handed to ``get_train_sample`` as well. Off-policy
    partial trajectories stay in their buffers and continue in the next call.

    A timestep with ``info['abnormal']`` (the env crashed and was restarted) discards that env's
    unfinished trajectory; samples already cut from it earlier in the episode are kept.
    """

    config = dict(
        type='sample',
        # Deep-copy each observation before it goes into a transition (for envs that reuse obs buffers).
        deepcopy_obs=False,
        # Turn each observation into a float32 tensor before the policy forward.
        transform_obs=False,
        # Log a summary when train_iter advanced by at least this much since the last summary.
        collect_print_freq=100,
    )

    def __init__(
        self,
        cfg: dict | None = None,
        env: Any | None = None,
        policy: Any | None = None,
        tb_logger: Any | None = None,
        exp_name: str = 'default_experiment',
        instance_name: str = 'collector',
    ) -> None:
        self._init_worker(cfg, tb_logger, exp_name, instance_name)
        self._deepcopy_obs = self._cfg.deepcopy_obs
        self._transform_obs = self._cfg.transform_obs
        self._default_n_sample = None
        self._unroll_len = 1
        self._on_policy = False
        self._traj_len_inf = False
        self.reset(policy, env)

    # ---- set-up --------------------------------------------------------------------------------
    def reset_env(self, _env: Any | None = None) -> None:
        """Attach and launch a new env manager, or reset the current one; unfinished trajectories are dropped."""
        if _env is not None:
            self._attach_env(_env)
        elif self._env is not None:
            self._env.reset()
        self._clear_trajectories()
        self._update_traj_len()

    def reset_policy(self, _policy: Any | None = None) -> None:
        """Attach a new policy (a ``Policy`` or its ``collect_mode``) or reset the current one."""
        if _policy is not None:
            self._attach_policy(_policy)
            policy_cfg = self._policy_attr('cfg', {}) or {}
            n_sample = self._cfg.get('n_sample')
            if n_sample is None:
                n_sample = self._policy_attr('n_sample')
            if n_sample is None:
                n_sample = policy_cfg.get('collect', {}).get('n_sample')
            self._default_n_sample = n_sample
            cfg_unroll = policy_cfg.get('collect', {}).get('unroll_len', 1)
            self._unroll_len = int(self._policy_attr('unroll_len', cfg_unroll) or 1)
            self._on_policy = bool(self._policy_attr('on_policy', policy_cfg.get('on_policy', False)))
            # DI-engine's sequence policies set it in policy.collect; older configs at the policy's top level
            traj_len_inf = policy_cfg.get('traj_len_inf', policy_cfg.get('collect', {}).get('traj_len_inf', False))
            self._traj_len_inf = bool(traj_len_inf)
        elif self._policy is not None:
            self._policy.reset()
        self._clear_trajectories()
        self._update_traj_len()

    def _clear_trajectories(self) -> None:
        self._traj_buffer: dict[int, list[dict[str, Any]]] = {i: [] for i in range(self._env_num)}
        self._env_step: dict[int, int] = {i: 0 for i in range(self._env_num)}
        self._env_sample: dict[int, int] = {i: 0 for i in range(self._env_num)}
        # env id -> (obs, policy output) of the step it was sent: an as-ready env manager answers it later
        self._stepping: dict[int, tuple[Any, dict[str, Any]]] = {}

    def _update_traj_len(self) -> None:
        if self._default_n_sample is None or self._traj_len_inf or not self._env_num:
            self._traj_len = float('inf')
        else:
            self._traj_len = max(self._unroll_len, ceil_div(self._default_n_sample, self._env_num))

    # ---- properties ----------------------------------------------------------------------------
    @property
    def traj_len(self) -> float:
        return self._traj_len

    # ---- collection ----------------------------------------------------------------------------
    def collect(
        self,
        n_sample: int | None = None,
        train_iter: int = 0,
        policy_kwargs: dict | None = None,
        record_random_collect: bool = True,
        drop_extra: bool = True,
    ) -> list[dict[str, Any]]:
        """Run the envs until at least ``n_sample`` training samples exist and return them.

        ``train_iter`` is written into every transition as ``collect_iter``. ``policy_kwargs`` go to
        every ``policy.forward`` call (e.g. ``{'eps': 0.1}``). ``drop_extra`` returns exactly
        ``n_sample`` samples (the extra ones made by the last step are discarded). With
        ``record_random_collect=False`` (warm-up with a random policy) the finished episodes of this
        call are not reported.
        """
        if self._env is None or self._policy is None:
            raise RuntimeError('SampleSerialCollector.collect: attach an env and a policy first (reset(policy, env))')
        if n_sample is None:
            n_sample = self._default_n_sample
            if n_sample is None:
                raise RuntimeError(
                    'SampleSerialCollector.collect: no n_sample given and none in the config (policy.collect.n_sample)'
                )
        if n_sample <= 0:
            raise ValueError(f'SampleSerialCollector.collect: n_sample must be positive, got {n_sample}')
        policy_kwargs = policy_kwargs or {}
        env, policy = self._env, self._policy
        forward, process, get_train_sample = policy.forward, policy.process_transition, policy.get_train_sample
        traj_buffer, traj_len = self._traj_buffer, self._traj_len
        env_step, env_sample = self._env_step, self._env_sample
        deepcopy_obs, transform_obs = self._deepcopy_obs, self._transform_obs
        episode_info = self._episode_info
        return_data: list[dict[str, Any]] = []
        collected_sample = collected_step = collected_episode = 0
        start = time.perf_counter()
        stepping = self._stepping
        while collected_sample < n_sample:
            obs = env.ready_obs
            if obs:
                if transform_obs:
                    obs = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in obs.items()}
                output = forward(obs, **policy_kwargs)
                for env_id, out in output.items():
                    stepping[env_id] = (obs[env_id], out)
                timesteps = env.step({env_id: out['action'] for env_id, out in output.items()})
            elif env.in_flight:  # an as-ready env manager: every env is stepping
                timesteps = env.step({})
            else:
                raise RuntimeError(
                    'SampleSerialCollector: no env is ready (did every env finish its '
                    "'episode_num' episodes? collector envs need episode_num=inf)"
                )
            for env_id, timestep in timesteps.items():
                sent_obs, sent_output = stepping.pop(env_id)
                info = timestep.info
                if info.get('abnormal', False):
                    traj_buffer[env_id] = []
                    env_step[env_id] = env_sample[env_id] = 0
                    policy.reset([env_id])
                    continue
                o = copy.deepcopy(sent_obs) if deepcopy_obs else sent_obs
                transition = process(o, sent_output, timestep)
                transition['collect_iter'] = train_iter
                transition['env_id'] = env_id
                traj = traj_buffer.get(env_id)
                if traj is None:
                    traj = traj_buffer[env_id] = []
                    env_step[env_id] = env_sample[env_id] = 0
                traj.append(transition)
                collected_step += 1
                done = timestep.done
                if done or len(traj) >= traj_len:
                    samples = get_train_sample(traj)
                    return_data.extend(samples)
                    collected_sample += len(samples)
                    env_sample[env_id] += len(samples)
                    # A fresh list: the policy may keep references into the one it was given.
                    traj_buffer[env_id] = []
                env_step[env_id] += 1
                if done:
                    collected_episode += 1
                    ret = episode_return_of(info)
                    if ret is not None:
                        episode_info.append(
                            {'return': ret, 'step': env_step[env_id], 'train_sample': env_sample[env_id]}
                        )
                    env_step[env_id] = env_sample[env_id] = 0
                    policy.reset([env_id])
        if self._on_policy:
            for env_id, traj in traj_buffer.items():
                if traj:
                    samples = get_train_sample(traj)
                    return_data.extend(samples)
                    collected_sample += len(samples)
                    traj_buffer[env_id] = []
        duration = time.perf_counter() - start
        self._total_envstep_count += collected_step
        self._total_episode_count += collected_episode
        self._total_train_sample_count += collected_sample
        if record_random_collect:
            self._log_steps += collected_step
            self._log_samples += collected_sample
            self._log_time += duration
            self._output_log(train_iter)
        else:
            episode_info.clear()
        if drop_extra and len(return_data) > n_sample:
            del return_data[n_sample:]
        return return_data

    def close(self) -> None:
        """Close the env manager and the loggers this collector opened; safe to call twice."""
        self._close_worker()
