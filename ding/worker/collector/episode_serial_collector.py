"""Collect whole episodes from a vectorised env."""

from __future__ import annotations

import copy
import time
from typing import Any

import torch

from ding.utils.registry import SERIAL_COLLECTOR_REGISTRY

from .base_serial_collector import BaseSerialCollector, episode_return_of


@SERIAL_COLLECTOR_REGISTRY.register('episode')
class EpisodeSerialCollector(BaseSerialCollector):
    """Steps every ready env with one batched ``policy.forward`` until ``n_episode`` episodes finished.

    ``collect`` returns one list of transitions per finished episode, or, with ``get_train_sample=True``,
    the flat list of training samples ``policy.get_train_sample(episode)`` makes from them (as DI-engine
    does). An episode interrupted by an abnormal timestep (env crash + restart) is dropped. Episodes still
    running when the count is reached continue in the next call.
    """

    config = dict(
        type='episode',
        deepcopy_obs=False,
        transform_obs=False,
        collect_print_freq=100,
        get_train_sample=False,
        # Hand each finished episode to ``env.reward_shaping(env_id, transitions)`` when the manager has it.
        reward_shaping=False,
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
        self._default_n_episode = None
        self.reset(policy, env)

    def reset_env(self, _env: Any | None = None) -> None:
        if _env is not None:
            if getattr(_env, 'wait_num', None) is not None:
                raise ValueError(
                    "EpisodeSerialCollector needs every env's answer in the step it was sent: use "
                    "env.manager.type='subprocess' (the as-ready 'async_subprocess' manager works with the sample "
                    'collector)'
                )
            self._attach_env(_env)
        elif self._env is not None:
            self._env.reset()
        self._clear_trajectories()

    def reset_policy(self, _policy: Any | None = None) -> None:
        if _policy is not None:
            self._attach_policy(_policy)
            n_episode = self._cfg.get('n_episode')
            if n_episode is None:
                n_episode = self._policy_attr('n_episode')
            if n_episode is None:
                n_episode = (self._policy_attr('cfg', {}) or {}).get('collect', {}).get('n_episode')
            self._default_n_episode = n_episode
        elif self._policy is not None:
            self._policy.reset()
        self._clear_trajectories()

    def _clear_trajectories(self) -> None:
        self._traj_buffer: dict[int, list[dict[str, Any]]] = {i: [] for i in range(self._env_num)}

    def collect(
        self, n_episode: int | None = None, train_iter: int = 0, policy_kwargs: dict | None = None
    ) -> list[Any]:
        """Run until ``n_episode`` episodes finished; return them (or their training samples)."""
        if self._env is None or self._policy is None:
            raise RuntimeError('EpisodeSerialCollector.collect: attach an env and a policy first (reset(policy, env))')
        if n_episode is None:
            n_episode = self._default_n_episode
            if n_episode is None:
                raise RuntimeError(
                    'EpisodeSerialCollector.collect: no n_episode given and none in the config '
                    '(policy.collect.n_episode)'
                )
        if n_episode <= 0:
            raise ValueError(f'EpisodeSerialCollector.collect: n_episode must be positive, got {n_episode}')
        policy_kwargs = policy_kwargs or {}
        env, policy = self._env, self._policy
        forward, process = policy.forward, policy.process_transition
        traj_buffer = self._traj_buffer
        to_sample, shaping = self._cfg.get_train_sample, self._cfg.reward_shaping
        return_data: list[Any] = []
        collected_episode = collected_step = collected_sample = 0
        start = time.perf_counter()
        while collected_episode < n_episode:
            obs = env.ready_obs
            if not obs:
                raise RuntimeError(
                    'EpisodeSerialCollector: no env is ready (did every env finish its '
                    "'episode_num' episodes? collector envs need episode_num=inf)"
                )
            if self._transform_obs:
                obs = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in obs.items()}
            output = forward(obs, **policy_kwargs)
            timesteps = env.step({env_id: out['action'] for env_id, out in output.items()})
            for env_id, timestep in timesteps.items():
                info = timestep.info
                if info.get('abnormal', False):
                    traj_buffer[env_id] = []
                    policy.reset([env_id])
                    continue
                o = copy.deepcopy(obs[env_id]) if self._deepcopy_obs else obs[env_id]
                transition = process(o, output[env_id], timestep)
                transition['collect_iter'] = train_iter
                transition['env_id'] = env_id
                traj = traj_buffer.setdefault(env_id, [])
                traj.append(transition)
                collected_step += 1
                if not timestep.done:
                    continue
                traj_buffer[env_id] = []
                if shaping and hasattr(env, 'reward_shaping'):
                    env.reward_shaping(env_id, traj)
                n_train = 0
                if to_sample:
                    samples = policy.get_train_sample(traj)
                    return_data.extend(samples)
                    n_train = len(samples)
                else:
                    return_data.append(traj)
                    n_train = len(traj)
                collected_sample += n_train
                collected_episode += 1
                ret = episode_return_of(info)
                if ret is not None:
                    self._episode_info.append({'return': ret, 'step': len(traj), 'train_sample': n_train})
                policy.reset([env_id])
        duration = time.perf_counter() - start
        self._total_envstep_count += collected_step
        self._total_episode_count += collected_episode
        self._total_train_sample_count += collected_sample
        self._log_steps += collected_step
        self._log_samples += collected_sample
        self._log_time += duration
        self._output_log(train_iter)
        return return_data

    def close(self) -> None:
        self._close_worker()
