"""The generic ``type='gymnasium'`` env on real gymnasium envs: spaces, wrappers by name, Atari preprocessing,
and its config check (what ``compile_config`` refuses before any work)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from easydict import EasyDict

from ding.config import ConfigError, compile_config
from ding.envs import GymnasiumEnv, create_env_manager, get_vec_env_setting
from ding.utils import ENV_REGISTRY

SWITCHES = 'tests.helpers.switches_env:Switches-v0'


def make(is_train: bool = True, **cfg):
    env = GymnasiumEnv(cfg={**cfg, 'is_train': is_train})
    env.seed(0)
    return env


def compile_env(model=None, **env):
    main = EasyDict(
        exp_name='gym_check',
        env=dict(collector_env_num=1, evaluator_env_num=1, **env),
        policy=dict(model=dict(obs_shape=6, action_shape=3) if model is None else model),
    )
    create = EasyDict(env=dict(type='gymnasium'), env_manager=dict(type='base'), policy=dict(type='dqn'))
    return compile_config(main, create_cfg=create, auto=True, save_cfg=False)


def test_registered_as_gymnasium_and_built_by_the_env_setting():
    assert ENV_REGISTRY.get_cls('gymnasium') is GymnasiumEnv
    env_fn, collector_cfgs, evaluator_cfgs = get_vec_env_setting(
        dict(type='gymnasium', env_id='Acrobot-v1', collector_env_num=2, evaluator_env_num=1)
    )
    assert env_fn is GymnasiumEnv and len(collector_cfgs) == 2 and len(evaluator_cfgs) == 1
    assert collector_cfgs[0]['is_train'] and not evaluator_cfgs[0]['is_train']


def test_discrete_env_with_a_step_limit():
    env = make(env_id='Acrobot-v1', max_episode_steps=5)
    try:
        assert env.observation_space.shape == (6,) and env.action_space.n == 3
        obs = env.reset()
        assert obs.dtype == np.float32 and obs.shape == (6,)
        for _ in range(5):
            timestep = env.step(np.int64(1))
        assert timestep.done and timestep.info['TimeLimit.truncated']
        assert timestep.info['eval_episode_return'] == -5.0
    finally:
        env.close()


def test_box_actions_scaled_and_observations_normalised_by_name():
    env = make(env_id='Pendulum-v1', act_scale=True, wrappers=[dict(name='obs_norm', clip=2.0)])
    try:
        obs = env.reset()
        seen = [obs]
        for _ in range(50):
            seen.append(env.step(np.array([1.0])).obs)
        seen = np.stack(seen)
        assert seen.dtype == np.float32 and np.all(np.abs(seen) <= 2.0)
        # normalised by the running statistics: far from the raw cos / sin / velocity ranges
        assert abs(float(seen[10:].mean())) < 2.0 and float(seen[10:].std()) > 0.1
    finally:
        env.close()


def test_multi_discrete_actions_reach_the_env_as_int_arrays():
    env = make(env_id=SWITCHES)
    try:
        assert list(env.action_space.nvec) == [3, 2, 4]
        target = env.reset()
        assert target.dtype == np.float32  # float64 observations become float32
        timestep = env.step(target.astype(np.int64).tolist())  # a list works as well as an array
        assert float(timestep.reward[0]) == 3.0
    finally:
        env.close()


def test_atari_training_envs_lose_a_life_and_clip_rewards_evaluation_envs_do_not():
    pytest.importorskip('ale_py')
    train = make(env_id='ALE/Breakout-v5')
    evaluate = make(is_train=False, env_id='ALE/Breakout-v5')
    try:
        obs = train.reset()
        assert obs.dtype == np.uint8 and obs.shape == (4, 84, 84)
        assert train.observation_space.shape == (4, 84, 84)
        timestep = train.step(1)  # FIRE launches the ball
        while not timestep.done:
            timestep = train.step(int(train.action_space.sample()))
        assert timestep.info['lives'] == 4  # one life lost ends the training episode
        evaluate.reset()
        steps, timestep = 0, evaluate.step(1)
        while not timestep.done:
            steps += 1
            timestep = evaluate.step(1 if steps % 50 == 0 else int(evaluate.action_space.sample()))
        assert timestep.info['lives'] == 0  # a whole game
    finally:
        train.close()
        evaluate.close()


def test_compile_config_fills_the_defaults():
    cfg = compile_env(env_id='Acrobot-v1')
    assert cfg.env.env_id == 'Acrobot-v1' and cfg.env.wrappers == [] and cfg.env.backend == 'gymnasium'


@pytest.mark.parametrize(
    'env, message',
    [
        (dict(env_id='Acrobat-v1'), "env.env_id 'Acrobat-v1': gymnasium cannot make it"),
        (dict(), 'env.env_id must name a gymnasium env id'),
        (dict(env_id='Acrobot-v1', wrapers=['obs_norm']), "env.wrapers: unknown key 'wrapers' in env; did you mean"),
        (dict(env_id='Acrobot-v1', wrappers=['norm']), "env.wrappers: unknown wrapper 'norm'"),
        (dict(env_id='Acrobot-v1', wrappers=[dict(name='obs_norm', scale=2)]), 'obs_norm takes the options'),
        (dict(env_id='Acrobot-v1', max_episode_steps=0), 'env.max_episode_steps = int 0 is out of range'),
        (dict(env_id='Acrobot-v1', backend='gym'), 'env.backend must be one of'),
        (dict(env_id='Acrobot-v1', act_scale='yes'), 'env.act_scale: expected True or False'),
    ],
    ids=['unknown-id', 'no-id', 'unknown-key', 'unknown-wrapper', 'wrapper-option', 'bound', 'backend', 'type'],
)
def test_compile_config_refuses_a_bad_section_naming_the_key(env, message):
    with pytest.raises(ConfigError, match=message.replace('(', r'\(')):
        compile_env(**env)


def test_subprocess_manager_keeps_frames_uint8():
    pytest.importorskip('ale_py')
    envs = create_env_manager(
        dict(type='subprocess'), [partial(GymnasiumEnv, cfg=dict(env_id='ALE/Pong-v5', is_train=True))] * 2
    )
    try:
        envs.seed(0)
        envs.launch()
        assert all(obs.dtype == np.uint8 and obs.shape == (4, 84, 84) for obs in envs.ready_obs.values())
        timesteps = envs.step({0: 1, 1: 0})
        assert all(t.obs.dtype == np.uint8 and t.obs.max() > 1 for t in timesteps.values())
    finally:
        envs.close()


@pytest.mark.parametrize(
    'env_id, obs_shape, action_shape',
    [
        ('Acrobot-v1', 6, 3),
        ('Pendulum-v1', 3, 1),
        (SWITCHES, 3, [3, 2, 4]),
        ('ALE/Pong-v5', [4, 84, 84], 6),
    ],
)
def test_model_shapes_left_out_are_taken_from_the_spaces(env_id, obs_shape, action_shape):
    if env_id.startswith('ALE/'):
        pytest.importorskip('ale_py')
    cfg = compile_env(model={}, env_id=env_id)
    assert (cfg.policy.model.obs_shape, cfg.policy.model.action_shape) == (obs_shape, action_shape)
    assert compile_env(model=dict(obs_shape=5), env_id=env_id).policy.model.obs_shape == 5  # given: kept
