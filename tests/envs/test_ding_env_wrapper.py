"""DingEnvWrapper and the dizoo classic-control envs on real gymnasium envs."""

import sys

import gymnasium
import numpy as np
import pytest
import torch

from ding.envs import BaseEnvTimestep, DingEnvWrapper, get_vec_env_setting
from dizoo.classic_control.cartpole.envs import CartPoleEnv
from dizoo.classic_control.pendulum.envs import PendulumEnv


def run_episode(env, policy=lambda t: t % 2):
    obs, t = env.reset(), 0
    while True:
        timestep = env.step(policy(t))
        t += 1
        if timestep.done:
            return obs, timestep, t


def test_truncation_is_flagged_and_termination_is_not():
    env = DingEnvWrapper(cfg={'env_id': 'CartPole-v1', 'max_episode_steps': 5})
    env.seed(0)
    # alternating pushes keep the pole up: the episode ends by the time limit
    _, last, length = run_episode(env)
    assert length == 5 and last.done
    assert last.info['TimeLimit.truncated'] is True
    assert last.info['eval_episode_return'] == 5.0

    env = DingEnvWrapper(cfg={'env_id': 'CartPole-v1'})
    env.seed(0)
    # always pushing right makes the pole fall well before 500 steps: a true termination
    _, last, length = run_episode(env, policy=lambda t: 1)
    assert length < 50 and last.done
    assert 'TimeLimit.truncated' not in last.info
    assert last.info['eval_episode_return'] == float(length)
    env.close()


def test_cartpole_env_types_and_200_step_limit():
    env = CartPoleEnv({})
    env.seed(3)
    obs = env.reset()
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.shape == (4,)
    assert env.action_space.n == 2 and env.observation_space.shape == (4,)
    timestep = env.step(0)
    assert isinstance(timestep, BaseEnvTimestep)
    assert timestep.reward.dtype == np.float32 and timestep.reward.shape == (1,)
    assert timestep.obs.dtype == np.float32 and timestep.done is False
    assert env._env.spec.max_episode_steps == 200
    assert repr(env) == 'DI-engine CartPole Env'
    env.close()
    env.close()


def test_pendulum_env_scales_and_clips_actions():
    env = PendulumEnv({'act_scale': True})
    env.seed(0)
    obs = env.reset()
    assert obs.shape == (3,) and obs.dtype == np.float32
    assert env.action_space.shape == (1,) and float(env.action_space.high[0]) == 2.0
    env.step(np.array([0.5], dtype=np.float32))
    assert env._env.unwrapped.last_u == pytest.approx(1.0)  # [-1, 1] -> [-2, 2]
    env.step(torch.tensor([-3.0]))
    assert env._env.unwrapped.last_u == pytest.approx(-2.0)  # clipped to -1, then scaled
    _, last, length = run_episode(env, policy=lambda t: np.zeros(1))
    assert length == 200 and last.info['TimeLimit.truncated'] is True
    assert last.info['eval_episode_return'] < 0

    raw = PendulumEnv({'act_scale': False})
    raw.reset()
    raw.step(5.0)
    assert raw._env.unwrapped.last_u == pytest.approx(2.0)  # torque clipped to the Box bounds
    raw.step(torch.tensor(-1.5))
    assert raw._env.unwrapped.last_u == pytest.approx(-1.5)
    with pytest.raises(ValueError, match='does not fit'):
        raw.step(np.zeros(2))
    env.close()
    raw.close()


@pytest.mark.parametrize(
    'action', [1, np.int64(1), np.array(1), np.array([1]), torch.tensor(1), torch.tensor([1]), 1.0]
)
def test_discrete_action_conversion(action):
    env = CartPoleEnv({})
    env.seed(0)
    env.reset()
    reference = CartPoleEnv({})
    reference.seed(0)
    reference.reset()
    assert np.array_equal(env.step(action).obs, reference.step(1).obs)


def test_discrete_action_rejects_bad_input():
    env = CartPoleEnv({})
    env.reset()
    with pytest.raises(ValueError, match='one number'):
        env.step(np.array([0, 1]))
    with pytest.raises(ValueError, match='integer'):
        env.step(0.5)


def first_obs_of_episodes(env, n):
    return [run_episode(env)[0] for _ in range(n)]


def test_seeding_reproducible_dynamic_and_static():
    a, b = CartPoleEnv({}), CartPoleEnv({})
    a.seed(11)
    b.seed(11)
    obs_a, obs_b = first_obs_of_episodes(a, 3), first_obs_of_episodes(b, 3)
    # same seed -> same episodes; dynamic seed -> each episode starts differently
    assert all(np.array_equal(x, y) for x, y in zip(obs_a, obs_b))
    assert not np.array_equal(obs_a[0], obs_a[1]) and not np.array_equal(obs_a[1], obs_a[2])

    c = CartPoleEnv({})
    c.seed(11, dynamic_seed=False)
    obs_c = first_obs_of_episodes(c, 3)
    assert np.array_equal(obs_c[0], obs_a[0])
    assert all(np.array_equal(obs_c[0], o) for o in obs_c)  # an evaluator replays the same episodes

    # re-seeding restarts the sequence
    a.seed(11)
    assert np.array_equal(first_obs_of_episodes(a, 1)[0], obs_a[0])
    other = CartPoleEnv({})
    other.seed(12)
    assert not np.array_equal(other.reset(), obs_a[0])


def test_mask_velocity_wrapper_of_the_vector_envs_works_on_a_serial_env():
    full, masked = CartPoleEnv({}), CartPoleEnv({'wrappers': ['mask_velocity']})
    for env in (full, masked):
        env.seed(3, dynamic_seed=False)
    assert masked.observation_space.shape == (2,)
    np.testing.assert_array_equal(masked.reset(), full.reset()[[0, 2]])  # position and angle, no velocities
    for action in (0, 1, 1, 0):
        np.testing.assert_array_equal(masked.step(action).obs, full.step(action).obs[[0, 2]])
    with pytest.raises(ValueError, match='env.wrappers'):
        CartPoleEnv({'wrappers': ['no_such_wrapper']}).reset()


def test_wrapper_needs_env_or_env_id_and_wraps_given_env():
    import gymnasium

    with pytest.raises(ValueError, match='env_id'):
        DingEnvWrapper(cfg={})
    env = DingEnvWrapper(env=gymnasium.make('CartPole-v1', max_episode_steps=3))
    _, last, length = run_episode(env)
    assert length == 3 and last.info['TimeLimit.truncated'] is True
    assert env.action_space.contains(env.random_action())
    clone = env.clone()
    assert clone.reset().shape == (4,)


def test_get_vec_env_setting_for_cartpole():
    cfg = dict(
        type='cartpole',
        import_names=['dizoo.classic_control.cartpole.envs.cartpole_env'],
        collector_env_num=8,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=195,
        manager=dict(type='base'),
    )
    env_fn, collector_cfgs, evaluator_cfgs = get_vec_env_setting(cfg)
    assert env_fn is CartPoleEnv
    assert len(collector_cfgs) == 8 and len(evaluator_cfgs) == 5
    assert 'collector_env_num' in cfg  # the caller's config is left alone
    env = env_fn(cfg=evaluator_cfgs[0])
    assert env.reset().shape == (4,)
    env.close()
    _, c_only, e_none = get_vec_env_setting(cfg, eval_=False)
    assert len(c_only) == 8 and e_none is None
    with pytest.raises(KeyError, match='collector_env_num'):
        get_vec_env_setting({'type': 'cartpole'}, eval_=False)
    with pytest.raises(KeyError, match='cartpol'):
        get_vec_env_setting({'type': 'cartpol', 'collector_env_num': 1})


def test_get_vec_env_setting_on_the_dizoo_cartpole_dqn_config():
    from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

    env_cfg = dict(main_config.env, **create_config.env)  # what compile_config puts under cfg.env
    env_fn, collector_cfgs, evaluator_cfgs = get_vec_env_setting(env_cfg)
    assert env_fn is CartPoleEnv
    assert len(collector_cfgs) == main_config.env.collector_env_num
    assert len(evaluator_cfgs) == main_config.env.evaluator_env_num
    env = env_fn(cfg=collector_cfgs[0])
    env.seed(0)
    _, last, length = run_episode(env, policy=lambda t: 1)
    assert last.info['eval_episode_return'] == float(length)
    env.close()


class _NoSpecEnv(gymnasium.Env):
    """A hand-made env (no registry spec) that renders nothing."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(2,))
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(2, dtype=np.float32), 0.0, True, False, {}


def _play_one_episode(env: DingEnvWrapper) -> None:
    env.seed(0)
    env.reset()
    done = False
    while not done:
        done = env.step(env.random_action()).done


def test_enable_save_replay_writes_an_mp4_per_episode(tmp_path):
    pytest.importorskip('moviepy')
    pytest.importorskip('pygame')
    replay_dir = tmp_path / 'replays'
    env = CartPoleEnv({})
    env.enable_save_replay(str(replay_dir))
    try:
        _play_one_episode(env)
        _play_one_episode(env)
    finally:
        env.close()
    videos = sorted(replay_dir.glob('*.mp4'))
    assert len(videos) == 2
    assert all(v.stat().st_size > 0 for v in videos)


def test_enable_save_replay_on_a_built_env_records_from_the_next_episode(tmp_path):
    pytest.importorskip('moviepy')
    pytest.importorskip('pygame')
    env = DingEnvWrapper(cfg={'env_id': 'CartPole-v1'})
    _play_one_episode(env)  # built without a render mode: rebuilt from its spec to render images
    env.enable_save_replay(str(tmp_path / 'replays'))
    try:
        _play_one_episode(env)
    finally:
        env.close()
    assert len(list((tmp_path / 'replays').glob('*.mp4'))) == 1


def test_enable_save_replay_refuses_an_env_that_cannot_render_images(tmp_path):
    pytest.importorskip('moviepy')
    env = DingEnvWrapper(env=_NoSpecEnv())
    with pytest.raises(ValueError, match='rgb_array'):
        env.enable_save_replay(str(tmp_path))


def test_enable_save_replay_without_moviepy_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'moviepy', None)  # what an install without the 'video' extra sees
    env = DingEnvWrapper(cfg={'env_id': 'CartPole-v1'})
    with pytest.raises(ImportError, match=r"pip install 'ding\[video\]'"):
        env.enable_save_replay(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_an_episode_reset_but_never_played_leaves_no_video(tmp_path):
    pytest.importorskip('moviepy')
    pytest.importorskip('pygame')
    env = CartPoleEnv({})
    env.enable_save_replay(str(tmp_path))
    try:
        _play_one_episode(env)
        env.reset()  # what an env manager's auto-reset does after the last episode it needs
    finally:
        env.close()
    assert len(list(tmp_path.glob('*.mp4'))) == 1
