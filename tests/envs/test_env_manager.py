"""Base and subprocess env managers on real CartPole envs, plus small envs that crash, hang or die."""

import functools
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest
from gymnasium import spaces

from ding.envs import (
    BaseEnv,
    BaseEnvManager,
    BaseEnvTimestep,
    SubprocessEnvManager,
    create_env_manager,
    get_env_manager_cls,
)
from ding.envs.env_manager import EnvState
from dizoo.classic_control.cartpole.envs import CartPoleEnv

MANAGERS = ['base', 'subprocess']


class CountingEnv(BaseEnv):
    """obs = number of steps taken this episode; raises on step ``crash_at`` of every instance (if set);
    episodes last ``episode_len`` steps."""

    def __init__(self, crash_at=None, episode_len=3, hang_marker=None, fail_reset=False):
        self._crash_at = crash_at
        self._episode_len = episode_len
        self._hang_marker = hang_marker
        self._fail_reset = fail_reset
        self._total = 0
        self._t = 0

    def reset(self):
        if self._fail_reset:
            raise OSError('simulator did not start')
        self._t = 0
        return np.zeros(2, dtype=np.float32)

    def step(self, action):
        self._total += 1
        self._t += 1
        if self._total == self._crash_at:
            raise ValueError('boom')
        if self._hang_marker is not None and self._t == 2 and not os.path.exists(self._hang_marker):
            open(self._hang_marker, 'w').close()  # only the first instance hangs
            time.sleep(30)
        done = self._t == self._episode_len
        info = {'eval_episode_return': float(self._t)} if done else {}
        return BaseEnvTimestep(np.full(2, self._t, dtype=np.float32), np.ones(1, dtype=np.float32), done, info)

    def seed(self, seed, dynamic_seed=True):
        pass

    def close(self):
        pass

    def __repr__(self):
        return 'CountingEnv'

    @property
    def observation_space(self):
        return spaces.Box(-np.inf, np.inf, (2,), np.float32)

    @property
    def action_space(self):
        return spaces.Discrete(2)

    @property
    def reward_space(self):
        return spaces.Box(0, 1, (1,), np.float32)


def cartpole_fns(n):
    return [functools.partial(CartPoleEnv, cfg={}) for _ in range(n)]


@pytest.fixture
def managers():
    """Creates managers through ``make(...)`` and closes every one of them after the test, even on failure."""
    made = []

    def make(kind, env_fns, **cfg):
        mgr = create_env_manager(dict(type=kind, **cfg), env_fns)
        made.append(mgr)
        return mgr

    yield make
    for mgr in made:
        mgr.close()
    assert mp.active_children() == []


def random_actions(obs, rng):
    return {i: int(rng.integers(2)) for i in obs}


@pytest.mark.parametrize('kind', MANAGERS)
def test_steps_four_cartpoles_through_episodes(kind, managers):
    mgr = managers(kind, cartpole_fns(4), episode_num=2)
    assert isinstance(mgr, SubprocessEnvManager if kind == 'subprocess' else BaseEnvManager)
    mgr.seed(0)
    mgr.launch()
    rng = np.random.default_rng(0)
    returns = {i: [] for i in range(4)}
    steps = 0
    while not mgr.done:
        obs = mgr.ready_obs
        assert all(o.shape == (4,) and o.dtype == np.float32 for o in obs.values())
        timesteps = mgr.step(random_actions(obs, rng))
        assert set(timesteps) == set(obs)
        for env_id, t in timesteps.items():
            steps += 1
            assert t.reward.shape == (1,) and t.obs.shape == (4,)
            if t.done:
                returns[env_id].append(t.info['eval_episode_return'])
                assert not t.info.get('abnormal')
    # every env ran its 2 episodes (auto reset in between) and then left ready_obs
    assert all(len(r) == 2 for r in returns.values())
    assert steps == sum(sum(r) for r in returns.values())
    assert mgr.ready_obs == {} and mgr.active_env == []
    assert set(mgr.env_state.values()) == {EnvState.DONE}
    mgr.close()
    mgr.close()  # idempotent
    with pytest.raises(RuntimeError, match='launch'):
        mgr.step({0: 0})


def collect_first_obs_and_returns(mgr, rng):
    first = mgr.ready_obs
    returns = {}
    while not mgr.done:
        for env_id, t in mgr.step(random_actions(mgr.ready_obs, rng)).items():
            if t.done:
                returns[env_id] = t.info['eval_episode_return']
    return first, returns


@pytest.mark.parametrize('kind', MANAGERS)
def test_seeds_static_evaluation_repeats_dynamic_collection_does_not(kind, managers):
    evaluator = managers(kind, cartpole_fns(2), episode_num=1)
    evaluator.seed(5, dynamic_seed=False)
    evaluator.launch()
    first_a, returns_a = collect_first_obs_and_returns(evaluator, np.random.default_rng(1))
    evaluator.reset()
    first_b, returns_b = collect_first_obs_and_returns(evaluator, np.random.default_rng(1))
    assert returns_a == returns_b
    assert all(np.array_equal(first_a[i], first_b[i]) for i in range(2))
    assert not np.array_equal(first_a[0], first_a[1])  # env i is seeded seed + i

    collector = managers(kind, cartpole_fns(2), episode_num=1)
    collector.seed(5)
    collector.launch()
    first_c = collector.ready_obs
    assert all(np.array_equal(first_a[i], first_c[i]) for i in range(2))  # first episode uses the seed itself
    collect_first_obs_and_returns(collector, np.random.default_rng(1))
    collector.reset()
    assert not np.array_equal(collector.ready_obs[0], first_c[0])


@pytest.mark.parametrize('kind', MANAGERS)
def test_crashing_env_is_restarted_and_reported_abnormal(kind, managers):
    fns = cartpole_fns(3) + [functools.partial(CountingEnv, crash_at=5, episode_len=100)]
    mgr = managers(kind, fns, retry_waiting_time=0.01)
    mgr.launch()
    pids = mgr.worker_pids if kind == 'subprocess' else None
    rng = np.random.default_rng(0)
    crash_log = []
    for _ in range(12):
        timesteps = mgr.step(random_actions(mgr.ready_obs, rng))
        assert set(timesteps) == {0, 1, 2, 3}  # the others keep going
        t = timesteps[3]
        crash_log.append(bool(t.info.get('abnormal')))
        for env_id in range(3):
            assert not timesteps[env_id].info.get('abnormal')
        if t.info.get('abnormal'):
            assert t.done and float(t.reward[0]) == 0.0 and 'boom' in t.info['error']
            # the replacement env starts a fresh episode
            assert np.array_equal(mgr.ready_obs[3], np.zeros(2, dtype=np.float32))
    # each new instance raises on its 5th step: steps 5 and 10 of the run
    assert [i for i, c in enumerate(crash_log) if c] == [4, 9]
    if kind == 'subprocess':
        assert mgr.worker_pids[3] != pids[3] and mgr.worker_pids[0] == pids[0]


@pytest.mark.parametrize('kind', MANAGERS)
def test_env_failing_every_reset_raises_after_max_retry(kind, managers):
    fns = cartpole_fns(1) + [functools.partial(CountingEnv, fail_reset=True)]
    mgr = managers(kind, fns, max_retry=3, retry_waiting_time=0.01)
    with pytest.raises(RuntimeError, match=r'env 1 failed 3 times in a row .*simulator did not start'):
        mgr.launch()
    assert mgr.closed


def test_subprocess_worker_killed_by_sigkill_recovers(managers):
    mgr = managers('subprocess', cartpole_fns(3))
    mgr.seed(0)
    mgr.launch()
    rng = np.random.default_rng(0)
    mgr.step(random_actions(mgr.ready_obs, rng))
    victim = mgr.worker_pids[1]
    os.kill(victim, signal.SIGKILL)
    timesteps = mgr.step(random_actions(mgr.ready_obs, rng))
    assert timesteps[1].info['abnormal'] is True and 'died' in timesteps[1].info['error']
    assert not timesteps[0].info.get('abnormal') and not timesteps[2].info.get('abnormal')
    assert mgr.worker_pids[1] != victim
    for _ in range(20):  # the replacement worker steps normally
        timesteps = mgr.step(random_actions(mgr.ready_obs, rng))
        assert not any(t.info.get('abnormal') for t in timesteps.values())
    mgr.close()
    assert mp.active_children() == []


def test_subprocess_step_timeout_replaces_hung_worker(managers, tmp_path):
    marker = str(tmp_path / 'hung_once')
    fns = [functools.partial(CountingEnv, episode_len=50), functools.partial(CountingEnv, hang_marker=marker)]
    mgr = managers('subprocess', fns, step_timeout=0.5)
    mgr.launch()
    mgr.step({0: 0, 1: 0})
    start = time.monotonic()
    timesteps = mgr.step({0: 0, 1: 0})
    assert time.monotonic() - start < 5
    assert 'TimeoutError' in timesteps[1].info['error'] and not timesteps[0].info.get('abnormal')
    assert mgr.step({0: 0, 1: 0})[1].obs[0] == 1.0  # a fresh episode in a new worker


@pytest.mark.parametrize('kind', MANAGERS)
def test_reset_param_subset_and_no_auto_reset(kind, managers):
    mgr = managers(kind, [functools.partial(CountingEnv, episode_len=2) for _ in range(2)], auto_reset=False)
    mgr.launch()
    mgr.step({0: 0, 1: 0})
    timesteps = mgr.step({0: 0, 1: 0})
    assert all(t.done for t in timesteps.values())
    assert mgr.ready_obs == {}  # without auto_reset a finished env waits for reset()
    with pytest.raises(KeyError, match='not waiting'):
        mgr.step({0: 0})
    mgr.reset({1: {}})
    assert list(mgr.ready_obs) == [1]
    assert mgr.step({1: 0})[1].obs[0] == 1.0


def test_factory_and_defaults():
    assert get_env_manager_cls({'type': 'subprocess'}) is SubprocessEnvManager
    assert get_env_manager_cls({}) is BaseEnvManager
    cfg = SubprocessEnvManager.default_config()
    assert cfg.max_retry == 5 and cfg.shared_memory is True and cfg.step_timeout is None
    assert cfg.episode_num == float('inf') and cfg.auto_reset is True
    with pytest.raises(KeyError, match='unknown type'):
        create_env_manager({'type': 'nope'}, cartpole_fns(1))
    mgr = create_env_manager({'type': 'base'}, cartpole_fns(2))
    assert mgr.env_num == 2 and mgr.observation_space.shape == (4,) and mgr.action_space.n == 2
    mgr.close()


@pytest.mark.parametrize('kind', MANAGERS)
def test_save_replay_on_launched_envs_records_from_the_next_reset(kind, managers, tmp_path):
    pytest.importorskip('moviepy')
    pytest.importorskip('pygame')
    mgr = managers(kind, cartpole_fns(2), episode_num=1, auto_reset=False)
    mgr.seed(0)
    mgr.launch()  # built before replays were asked for, as an evaluator's envs are
    first, second = tmp_path / 'iteration_0', tmp_path / 'iteration_10'
    rng = np.random.default_rng(0)
    for replay_dir in (first, second):  # one directory per evaluation, as the evaluator asks
        mgr.enable_save_replay(str(replay_dir))
        mgr.reset()
        collect_first_obs_and_returns(mgr, rng)
    mgr.close()  # ends the recordings
    assert len(list(first.glob('*.mp4'))) == 2
    assert len(list(second.glob('*.mp4'))) == 2
