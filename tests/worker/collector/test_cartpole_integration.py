"""The workers with the real CartPole env, env manager, DQN policy and learner: a few real iterations."""

from functools import partial

import pytest
import torch

pytest.importorskip('gymnasium')

from ding.envs.env_manager.base_env_manager import BaseEnvManager  # noqa: E402
from ding.worker.collector import InteractionSerialEvaluator, SampleSerialCollector  # noqa: E402
from ding.worker.replay_buffer import create_buffer  # noqa: E402

MODEL = dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[32, 32], dueling=True)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cartpole_manager(env_num, seed, dynamic_seed=True):
    from dizoo.classic_control.cartpole.envs.cartpole_env import CartPoleEnv

    mgr = BaseEnvManager([partial(CartPoleEnv, {}) for _ in range(env_num)])
    mgr.seed(seed, dynamic_seed=dynamic_seed)
    return mgr


def dqn_policy(**cfg):
    from ding.policy.dqn import DQNPolicy

    torch.manual_seed(0)
    return DQNPolicy(dict(model=MODEL, collect=dict(n_sample=32), **cfg))


def test_dqn_collect_prioritized_replay_and_learn(workdir):
    from ding.worker.learner import BaseLearner

    policy = dqn_policy(priority=True, priority_IS_weight=True, learn=dict(batch_size=32))
    collector = SampleSerialCollector(dict(), cartpole_manager(4, seed=0), policy.collect_mode, exp_name='exp')
    learner = BaseLearner(dict(hook=dict(save_ckpt_after_run=False)), policy.learn_mode, exp_name='exp')
    buffer = create_buffer(dict(type='advanced', replay_buffer_size=1000, alpha=0.6), exp_name='exp')
    try:
        assert collector.traj_len == 8  # ceil(32 / 4)
        for _it in range(4):
            data = collector.collect(train_iter=learner.train_iter, policy_kwargs={'eps': 0.5})
            assert len(data) == 32
            keys = {'obs', 'next_obs', 'action', 'reward', 'done', 'collect_iter', 'env_id'}
            assert all(keys <= set(d) for d in data)
            buffer.push(data, cur_collector_envstep=collector.envstep)
            for _ in range(2):
                batch = buffer.sample(32, learner.train_iter)
                assert all(0 < d['IS'] <= 1 for d in batch)
                learner.train(batch, collector.envstep)
                info = learner.priority_info
                assert len(info['priority']) == 32
                assert info['replay_unique_id'] == [d['replay_unique_id'] for d in batch]
                buffer.update(info)
        # episodes ending mid-trajectory desynchronise the envs, so a call may step more than n_sample times
        assert collector.envstep >= 128 and buffer.count() == 128 and learner.train_iter == 8
        # updated TD-error priorities make the IS weights differ
        assert len({round(d['IS'], 6) for d in buffer.sample(32, learner.train_iter)}) > 1
    finally:
        collector.close()
        learner.close()
        buffer.close()


def test_dqn_evaluator_on_cartpole_is_repeatable(workdir):
    policy = dqn_policy()
    evaluator = InteractionSerialEvaluator(
        dict(n_episode=3, stop_value=195), cartpole_manager(2, 7, dynamic_seed=False), policy.eval_mode, exp_name='exp'
    )
    saved = []
    try:
        stop, first = evaluator.eval(saved.append, train_iter=0, envstep=0)
        assert len(first['eval_episode_return']) == 3 and not stop
        assert all(1 <= r <= 200 for r in first['eval_episode_return'])
        _, second = evaluator.eval(saved.append, train_iter=1, envstep=10)
        assert second['eval_episode_return'] == first['eval_episode_return']  # static seeds, greedy policy
        assert saved == ['ckpt_best']
    finally:
        evaluator.close()


def test_ppo_rollouts_are_cut_and_bootstrapped(workdir):
    from ding.policy.ppo import PPOPolicy
    from ding.worker.learner import BaseLearner

    torch.manual_seed(0)
    policy = PPOPolicy(
        dict(
            model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[32, 32]),
            collect=dict(n_sample=64),
            learn=dict(epoch_per_collect=1, batch_size=32),
        )
    )
    collector = SampleSerialCollector(dict(), cartpole_manager(4, seed=1), policy.collect_mode, exp_name='exp')
    learner = BaseLearner(dict(hook=dict(save_ckpt_after_run=False)), policy.learn_mode, exp_name='exp')
    try:
        assert collector.traj_len == 16
        expected_iters = 0
        for _it in range(3):
            data = collector.collect(train_iter=learner.train_iter, drop_extra=False)
            expected_iters += -(-len(data) // 32)  # one training iteration per optimizer step (minibatch)
            assert len(data) >= 64 and all(d['collect_iter'] == learner.train_iter for d in data)
            assert all('adv' in d and 'traj_flag' in d for d in data)
            # each trajectory segment is contiguous and ends with traj_flag; at most traj_len long
            ends = [i for i, d in enumerate(data) if d['traj_flag']]
            assert ends[-1] == len(data) - 1
            lengths = [b - a for a, b in zip([-1] + ends[:-1], ends)]
            assert max(lengths) <= 16
            # segments cut at traj_len or at the end of the rollout did not terminate: PPO bootstraps them
            assert any(not bool(data[i]['done']) for i in ends)
            assert all(not traj for traj in collector._traj_buffer.values())  # nothing carried over
            learner.train(data, collector.envstep)
        assert learner.train_iter == expected_iters
    finally:
        collector.close()
        learner.close()


def test_commander_eps_schedule_from_dqn_command_policy(workdir):
    from ding.policy import create_policy
    from ding.worker.coordinator import create_serial_commander
    from ding.worker.learner import BaseLearner

    cfg = dict(
        type='dqn_command',
        model=MODEL,
        collect=dict(n_sample=16),
        other=dict(eps=dict(type='linear', start=0.9, end=0.1, decay=100)),
    )
    policy = create_policy(cfg, enable_field=['learn', 'collect', 'eval', 'command'])
    collector = SampleSerialCollector(dict(), cartpole_manager(2, seed=0), policy.collect_mode, exp_name='exp')
    learner = BaseLearner(dict(hook=dict(save_ckpt_after_run=False)), policy.learn_mode, exp_name='exp')
    try:
        commander = create_serial_commander(dict(), learner, collector, None, None, policy.command_mode)
        first = commander.step()
        assert first == {'eps': pytest.approx(0.9)}
        collector.collect(policy_kwargs=first)
        second = commander.step()
        assert second['eps'] < first['eps']
        assert second == {'eps': pytest.approx(0.9 - 0.8 * collector.envstep / 100)}
    finally:
        collector.close()
        learner.close()
