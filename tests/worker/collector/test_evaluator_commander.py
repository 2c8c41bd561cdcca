"""InteractionSerialEvaluator, EpisodeSerialCollector and BaseSerialCommander on real envs and a real policy."""

import pytest

from ding.utils.registry import COMMANDER_REGISTRY, SERIAL_EVALUATOR_REGISTRY
from ding.worker.collector import (
    EpisodeSerialCollector,
    InteractionSerialEvaluator,
    create_serial_collector,
    create_serial_evaluator,
)
from ding.worker.coordinator import BaseSerialCommander, create_serial_commander
from tests.helpers.serial_toys import TinyPolicy, make_manager


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ---- evaluator -------------------------------------------------------------------------------------
def test_eval_returns_each_episode_and_saves_best_only_on_improvement(workdir):
    policy = TinyPolicy()
    evaluator = create_serial_evaluator(
        dict(n_episode=5, stop_value=4), env=make_manager(2, lens=[4, 3]), policy=policy.eval_mode, exp_name='exp'
    )
    saved = []
    try:
        assert SERIAL_EVALUATOR_REGISTRY.get_cls('interaction') is InteractionSerialEvaluator
        assert evaluator.best_return == float('-inf')
        policy.prefer(0)  # reward 0 every step
        stop, info = evaluator.eval(saved.append, train_iter=0, envstep=0)
        assert info['eval_episode_return'] == [0.0] * 5 and info['eval_episode_return_mean'] == 0.0
        assert not stop and saved == ['ckpt_best'] and evaluator.best_return == 0.0
        stop, _ = evaluator.eval(saved.append, train_iter=10, envstep=100)
        assert saved == ['ckpt_best']  # same return: no new best checkpoint
        policy.prefer(1)  # reward 1 every step: env 0 plays 3 episodes of 4 steps, env 1 two of 3 steps
        stop, info = evaluator.eval(saved.append, train_iter=20, envstep=200)
        assert info['eval_episode_return'] == [4.0, 4.0, 4.0, 3.0, 3.0]
        assert info['eval_episode_return_mean'] == pytest.approx(3.6)
        assert info['eval_episode_return_max'] == 4.0 and info['eval_episode_return_min'] == 3.0
        assert saved == ['ckpt_best', 'ckpt_best'] and evaluator.best_return == pytest.approx(3.6)
        assert not stop  # 3.6 < stop_value 4
        stop, info = evaluator.eval(None, train_iter=30, envstep=300, n_episode=3)
        assert info['eval_episode_return'] == [4.0, 4.0, 3.0]
    finally:
        evaluator.close()
    text = (workdir / 'exp' / 'log' / 'evaluator' / 'evaluator_logger.txt').read_text()
    assert 'reward_mean' in text and 'avg_envstep_per_episode' in text


def test_stop_flag_when_mean_return_reaches_stop_value(workdir):
    policy = TinyPolicy()
    policy.prefer(1)
    evaluator = InteractionSerialEvaluator(
        dict(n_episode=2, stop_value=5), make_manager(2, episode_len=5), policy, exp_name='exp'
    )  # a full Policy is narrowed to eval_mode
    try:
        stop, info = evaluator.eval(train_iter=3)
        assert stop and info['eval_episode_return_mean'] == 5.0
    finally:
        evaluator.close()
    assert 'stop_value' in (workdir / 'exp' / 'log' / 'evaluator' / 'evaluator_logger.txt').read_text()


def test_eval_replays_the_same_episodes_and_skips_crashed_ones(workdir):
    policy = TinyPolicy()
    policy.prefer(1)
    # env 1 crashes once at step 1: that episode is not counted, a full one replaces it
    evaluator = InteractionSerialEvaluator(
        dict(n_episode=4), make_manager(2, episode_len=3, crash_env=1, crash_at=1), policy.eval_mode, exp_name='exp'
    )
    try:
        _, first = evaluator.eval()
        _, second = evaluator.eval()
        assert first['eval_episode_return'] == second['eval_episode_return'] == [3.0] * 4
    finally:
        evaluator.close()


def test_should_eval_schedule(workdir):
    evaluator = InteractionSerialEvaluator(dict(eval_freq=10), exp_name='exp')
    try:
        assert evaluator.should_eval(0)
        assert not evaluator.should_eval(0)  # never twice for one iteration
        assert not evaluator.should_eval(5)
        assert evaluator.should_eval(10)
        assert not evaluator.should_eval(19)
        assert evaluator.should_eval(25)
    finally:
        evaluator.close()


# ---- episode collector -----------------------------------------------------------------------------
def test_episode_collector_returns_whole_episodes(workdir):
    policy = TinyPolicy()
    env = make_manager(2, episode_len=4, crash_env=0, crash_at=1)
    collector = create_serial_collector(dict(type='episode'), env=env, policy=policy.collect_mode, exp_name='exp')
    try:
        assert isinstance(collector, EpisodeSerialCollector)
        episodes = collector.collect(n_episode=3, train_iter=2)
        assert len(episodes) == 3
        for ep in episodes:
            assert [int(t['obs'][0]) for t in ep] == [0, 1, 2, 3] and ep[-1]['done']
            assert all(t['collect_iter'] == 2 for t in ep)
        assert collector.envstep >= 12
    finally:
        collector.close()


def test_episode_collector_can_return_train_samples(workdir):
    policy = TinyPolicy()
    collector = EpisodeSerialCollector(
        dict(get_train_sample=True), make_manager(2, episode_len=3), policy, exp_name='exp'
    )
    try:
        samples = collector.collect(n_episode=2)
        assert len(samples) == 6 and all(isinstance(s, dict) for s in samples)
        assert [len(t) for t in policy.train_sample_calls] == [3, 3]
    finally:
        collector.close()


# ---- commander -------------------------------------------------------------------------------------
def test_commander_gives_eps_from_policy_command_mode(workdir):
    from ding.worker.learner import BaseLearner

    policy = TinyPolicy()  # eps decays linearly from 1.0 to 0.1 over 100 env steps
    collector = create_serial_collector(
        dict(type='sample'), env=make_manager(2), policy=policy.collect_mode, exp_name='exp'
    )
    learner = BaseLearner(dict(), policy.learn_mode, exp_name='exp')
    try:
        commander = create_serial_commander({}, learner, collector, None, None, policy.command_mode)
        assert isinstance(commander, BaseSerialCommander) and COMMANDER_REGISTRY.get_cls('base') is BaseSerialCommander
        kwargs = commander.step()
        assert kwargs == {'eps': pytest.approx(1.0)}
        collector.collect(n_sample=50, policy_kwargs=kwargs)
        kwargs = commander.step()
        assert kwargs['eps'] == pytest.approx(1.0 - 0.9 * collector.envstep / 100)
        assert policy.collect_kwargs_seen[-1] == {'eps': pytest.approx(1.0)}
        # no command mode -> no settings
        no_cmd = TinyPolicy(enable_field=['learn', 'collect', 'eval'])
        assert BaseSerialCommander({}, learner, collector, None, None, no_cmd).step() == {}
    finally:
        collector.close()
        learner.close()
