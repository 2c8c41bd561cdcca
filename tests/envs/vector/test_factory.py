"""make_vector_env on both backends: shapes and dtypes, the reset-on-the-next-step semantics, time limits,
seeds, double buffering with send / recv, backend choice and the errors that name the key."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import pytest

from ding.envs.vector import EnvPoolVectorEnv, GymnasiumVectorEnv, choose_backend, make_vector_env, read_settings

BACKENDS = ('envpool', 'gymnasium')
CORRIDOR = 'tests.helpers.corridor_env:Corridor-v0'  # terminates on the 3rd step of action 1; not in EnvPool


@pytest.fixture
def closing() -> Iterator[list]:
    """Envs appended here are closed after the test, even when it fails."""
    envs: list = []
    yield envs
    for env in envs:
        env.close()


def make(closing: list, env_cfg: dict, num_envs: int = 3, seed: int = 0, **kwargs):
    env = make_vector_env(env_cfg, num_envs, seed, **kwargs)
    closing.append(env)
    return env


def copied(step: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """A step's arrays are valid until the next send: keep copies to compare later steps with."""
    return tuple(np.array(a, copy=True) for a in step)


@pytest.mark.parametrize('backend', BACKENDS)
def test_cartpole_batch_shapes_and_dtypes(closing, backend):
    env = make(closing, dict(env_id='CartPole-v1', backend=backend))
    assert (env.num_envs, env.observation_shape, env.observation_dtype, env.action_num) == (3, (4,), np.float32, 2)
    obs = env.reset(seed=0)
    assert obs.shape == (3, 4) and obs.dtype == np.float32
    obs, reward, terminated, truncated = env.step(np.array([0, 1, 0]))
    assert obs.shape == (3, 4) and obs.dtype == np.float32
    assert reward.dtype == np.float32 and reward.tolist() == [1.0, 1.0, 1.0]
    assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_ and terminated.shape == (3,)


@pytest.mark.parametrize('backend', BACKENDS)
def test_an_ended_episode_resets_on_the_next_step_with_reward_zero(closing, backend):
    env = make(closing, dict(env_id='CartPole-v1', backend=backend), num_envs=2)
    env.reset(seed=1)
    for _ in range(100):  # always pushing right: the pole falls within ~10 steps
        obs, reward, terminated, truncated = copied(env.step(np.ones(2, dtype=np.int64)))
        if terminated[0]:
            break
    assert terminated[0] and reward[0] == 1.0 and np.abs(obs[0, 2]) > 0.2  # the last step: the pole fell
    obs, reward, terminated, truncated = env.step(np.ones(2, dtype=np.int64))
    assert reward[0] == 0.0 and not terminated[0] and not truncated[0]
    assert np.all(np.abs(obs[0]) <= 0.05)  # CartPole's first observations are uniform in [-0.05, 0.05]
    obs, reward, terminated, truncated = env.step(np.ones(2, dtype=np.int64))
    assert reward[0] == 1.0  # the new episode runs


def test_gymnasium_reset_step_ignores_the_action_and_returns_the_first_observation(closing):
    env = make(closing, dict(env_id=CORRIDOR), num_envs=2)
    first = env.reset(seed=0).copy()
    steps = [copied(env.step(np.ones(2, dtype=np.int64))) for _ in range(5)]
    assert [s[2].tolist() for s in steps] == [[False, False], [False, False], [True, True], [False, False]] + [
        [False, False]
    ]
    np.testing.assert_allclose(steps[2][0], first + 3, rtol=1e-6)  # the terminal observation comes with terminated
    assert steps[3][1].tolist() == [0.0, 0.0] and np.all(steps[3][0] < 0.5)  # reset step: new start, no reward
    np.testing.assert_allclose(steps[4][0], steps[3][0] + 1, rtol=1e-6)


@pytest.mark.parametrize('backend', BACKENDS)
def test_max_episode_steps_truncates_and_the_next_step_resets(closing, backend):
    env = make(closing, dict(env_id='CartPole-v1', backend=backend, max_episode_steps=5), num_envs=2)
    env.reset(seed=0)
    alternate = [np.array([t % 2] * 2) for t in range(6)]  # balances: no termination in 6 steps
    steps = [copied(env.step(a)) for a in alternate]
    assert [bool(s[3][0]) for s in steps] == [False, False, False, False, True, False]
    assert not any(s[2].any() for s in steps)
    assert steps[5][1].tolist() == [0.0, 0.0]


@pytest.mark.parametrize('backend', BACKENDS)
def test_the_same_seed_gives_the_same_episodes_and_another_seed_others(closing, backend):
    def rollout(env, seed: int) -> np.ndarray:
        observations = [env.reset(seed).copy()]
        for t in range(30):
            observations.append(env.step(np.array([t % 2, 1, 0]))[0].copy())
        return np.stack(observations)

    env = make(closing, dict(env_id='CartPole-v1', backend=backend))
    first = rollout(env, 7)
    np.testing.assert_array_equal(rollout(env, 7), first)  # reset(seed) again replays the same episodes
    other = make(closing, dict(env_id='CartPole-v1', backend=backend), seed=7)
    np.testing.assert_array_equal(rollout(other, 7), first)
    assert not np.array_equal(rollout(env, 8), first)
    assert not np.array_equal(first[0, 0], first[0, 1])  # each env of the batch has its own seed


@pytest.mark.parametrize('backend', BACKENDS)
def test_two_groups_double_buffered_with_send_and_recv_match_plain_steps(closing, backend):
    cfg = dict(env_id='CartPole-v1', backend=backend)
    groups = [make(closing, cfg, num_envs=2), make(closing, cfg, num_envs=2)]
    plain = make(closing, cfg, num_envs=2)
    for group in groups:
        group.reset(seed=3)
    plain.reset(seed=3)
    for t in range(20):
        action = np.array([t % 2, (t // 3) % 2])
        for group in groups:  # both groups step at once; the actor would run inference meanwhile
            group.send(action)
        results = [copied(group.recv()) for group in groups]
        expected = plain.step(action)
        for result in results:
            for got, want in zip(result, expected):
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize('backend', BACKENDS)
def test_mask_velocity_keeps_position_and_angle(closing, backend):
    full = make(closing, dict(env_id='CartPole-v1', backend=backend), num_envs=2)
    masked = make(closing, dict(env_id='CartPole-v1', backend=backend, wrappers=['mask_velocity']), num_envs=2)
    assert masked.observation_shape == (2,)
    np.testing.assert_array_equal(masked.reset(seed=0), full.reset(seed=0)[:, [0, 2]])
    for t in range(12):
        action = np.array([t % 2, 1])
        np.testing.assert_array_equal(masked.step(action)[0], full.step(action)[0][:, [0, 2]])


def test_mask_velocity_takes_the_entries_to_keep_for_other_envs(closing):
    env = make(
        closing,
        dict(env_id='Acrobot-v1', backend='gymnasium', wrappers=[dict(name='mask_velocity', keep=[0, 1, 2, 3])]),
        num_envs=1,
    )
    assert env.observation_shape == (4,) and env.reset(seed=0).shape == (1, 4)
    with pytest.raises(ValueError, match=r'env.wrappers: mask_velocity knows .* keep=\[\.\.\.\]'):
        make_vector_env(dict(env_id='Acrobot-v1', wrappers=['mask_velocity']), 1, 0)


def test_the_backend_is_envpool_when_it_ships_the_id_else_gymnasium():
    assert choose_backend(read_settings(dict(env_id='CartPole-v1'), False)) == 'envpool'
    assert choose_backend(read_settings(dict(env_id='ALE/Pong-v5'), False)) == 'envpool'
    assert choose_backend(read_settings(dict(env_id=CORRIDOR), False)) == 'gymnasium'
    assert choose_backend(read_settings(dict(env_id='CartPole-v1', backend='gymnasium'), False)) == 'gymnasium'


def test_one_env_or_sync_mode_steps_in_this_process(closing):
    one = make(closing, dict(env_id=CORRIDOR), num_envs=1)
    sync = make(closing, dict(env_id=CORRIDOR, vectorization_mode='sync'), num_envs=2)
    for env in (one, sync):
        assert isinstance(env, GymnasiumVectorEnv) and env.worker_pids == []
        env.reset(seed=0)
        assert env.step(np.ones(env.num_envs))[1].tolist() == [1.0] * env.num_envs


@pytest.mark.parametrize(
    ('env_cfg', 'message'),
    [
        (dict(), 'env.env_id must name a gymnasium env id'),
        (dict(env_id='CartPole-v1', backend='ray'), 'env.backend must be one of'),
        (dict(env_id='CartPole-v1', wrappers=['flip']), "env.wrappers: unknown wrapper 'flip'"),
        (dict(env_id='CartPole-v1', wrappers=[3]), r'env.wrappers\[0\] must be a name'),
        (dict(env_id='CartPole-v1', max_episode_steps=0), 'env.max_episode_steps must be a positive int'),
        (dict(env_id='CartPole-v1', vectorization_mode='threads'), 'env.vectorization_mode must be one of'),
        (dict(env_id='CartPole-v1', envpool_kwargs=dict(colour=1)), "env.envpool_kwargs for 'CartPole-v1'"),
        (dict(env_id=CORRIDOR, backend='envpool'), "envpool does not ship .*use env.backend='gymnasium'"),
        (dict(env_id='CartPole-v1', backend='envpool', wrappers=['atari']), 'atari applies to Atari games'),
        (dict(env_id='Pendulum-v1', backend='envpool'), 'needs a Discrete action space'),
        (dict(env_id='Pendulum-v1', backend='gymnasium'), 'needs a Discrete action space'),
        (dict(env_id='NoSuchEnv-v0', backend='gymnasium'), "env.env_id 'NoSuchEnv-v0': gymnasium cannot make it"),
    ],
)
def test_bad_settings_name_their_key(env_cfg, message):
    with pytest.raises(ValueError, match=message):
        make_vector_env(env_cfg, 2, 0)


def test_bad_num_envs_is_refused():
    with pytest.raises(ValueError, match='num_envs must be a positive int'):
        make_vector_env(dict(env_id='CartPole-v1'), 0, 0)


def test_asking_for_envpool_without_it_installed_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, 'envpool', None)  # what an import sees where the package is missing
    with pytest.raises(ImportError, match=r"pip install 'ding\[envpool\]'"):
        make_vector_env(dict(env_id='CartPole-v1', backend='envpool'), 2, 0)
    assert choose_backend(read_settings(dict(env_id='CartPole-v1'), False)) == 'gymnasium'


def test_envpool_backend_object(closing):
    env = make(closing, dict(env_id='CartPole-v1'))
    assert isinstance(env, EnvPoolVectorEnv) and 'CartPole-v1' in repr(env)


@pytest.mark.parametrize('backend', BACKENDS)
def test_env_i_of_a_batch_plays_as_a_single_env_seeded_with_seed_plus_i(closing, backend):
    cfg = dict(
        env_id='CartPole-v1', backend=backend, envpool_kwargs=dict(num_threads=2) if backend == 'envpool' else {}
    )
    batch = make(closing, cfg, num_envs=4, seed=10)
    singles = [make(closing, cfg, num_envs=1, seed=10 + i) for i in range(4)]
    actions = np.random.default_rng(0).integers(0, 2, (40, 4))
    got = [batch.reset(seed=10).copy()] + [batch.step(a)[0].copy() for a in actions]
    for i, single in enumerate(singles):
        want = [single.reset(seed=10 + i).copy()] + [single.step(a[i : i + 1])[0].copy() for a in actions]
        np.testing.assert_array_equal(np.stack(got)[:, i], np.stack(want)[:, 0])


def test_float64_observations_come_as_float32(closing):
    env = make(closing, dict(env_id=CORRIDOR, make_kwargs=dict(dtype='float64')), num_envs=2)
    assert env.observation_dtype == np.float32
    assert env.reset(seed=0).dtype == np.float32 and env.step(np.ones(2))[0].dtype == np.float32
