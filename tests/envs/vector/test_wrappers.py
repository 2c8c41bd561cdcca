"""The gymnasium backend's Atari preprocessing: stacked 84x84 grey frames, and episodic life that ends the
learner's episode on a lost life while the game goes on, FIRE after a reset; observation normalisation."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from ding.envs.vector import WRAPPERS, EpisodicLife, make_vector_env
from ding.envs.vector.gymnasium_env import build_env, register_atari
from ding.envs.vector.settings import WRAPPER_NAMES, read_settings


def test_gymnasium_pong_matches_envpools_layout():
    env = make_vector_env(dict(env_id='ALE/Pong-v5', backend='gymnasium'), 2, 0)
    try:
        assert (env.observation_shape, env.observation_dtype, env.action_num) == ((4, 84, 84), np.uint8, 6)
        obs = env.reset(seed=0)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        assert env.step(np.array([0, 1]))[0].shape == (2, 4, 84, 84)
    finally:
        env.close()


def test_episodic_life_ends_the_episode_on_a_lost_life_and_keeps_the_game():
    register_atari()
    env = EpisodicLife(gymnasium.make('ALE/Breakout-v5', repeat_action_probability=0.0))
    try:
        _, info = env.reset(seed=0)
        lives = info['lives']
        assert lives == 5
        rng = np.random.default_rng(0)
        for _ in range(2000):
            _, _, terminated, truncated, info = env.step(int(rng.integers(4)))
            if terminated:
                break
        assert terminated and info['lives'] == lives - 1 and not env.game_over
        _, info = env.reset()  # continues the game: one life fewer, not a new game
        assert info['lives'] == lives - 1
    finally:
        env.close()


def test_every_accepted_wrapper_name_is_registered():
    assert tuple(WRAPPERS) == WRAPPER_NAMES


@pytest.mark.parametrize('fire_reset', [False, True])
def test_fire_reset_serves_the_ball_so_a_still_paddle_loses_a_life(fire_reset):
    pytest.importorskip('ale_py')
    settings = read_settings(dict(env_id='ALE/Breakout-v5', fire_reset=fire_reset), for_eval=False)
    env = build_env(settings)
    try:
        env.reset(seed=0)
        for _ in range(200):  # NOOP only: without FIRE the ball is never served
            _, _, terminated, truncated, info = env.step(0)
            if terminated or truncated:
                break
        assert (info['lives'] == 4) == fire_reset
    finally:
        env.close()


def test_obs_norm_centres_and_scales_each_entry():
    env = build_env(read_settings(dict(env_id='MountainCarContinuous-v0', wrappers=['obs_norm']), for_eval=False))
    try:
        obs, _ = env.reset(seed=0)
        seen = [obs]
        for _ in range(300):
            seen.append(env.step(np.array([1.0], dtype=np.float32))[0])
        seen = np.stack(seen)
        assert seen.dtype == np.float32 and seen.shape == (301, 2)
        # raw positions sit near -0.5 with a spread of ~0.1; normalised, each entry is centred with unit spread
        assert np.all(np.abs(seen.mean(axis=0)) < 0.5) and np.all(seen.std(axis=0) > 0.5)
    finally:
        env.close()
