"""The comm learner's hooks on a real BaseLearner training a real DQN policy (serial calls, no HTTP)."""

import pytest
from easydict import EasyDict

from ding.policy import DQNPolicy, create_policy
from ding.worker.learner import BaseLearner
from ding.worker.learner.comm import LearnInfoGate, SendLearnInfoHook, SendPolicyHook
from tests.helpers.comm_learner import dqn_samples, policy_config

NO_HOOKS = dict(load_ckpt_before_run='', log_show_after_iter=0, save_ckpt_after_iter=0, save_ckpt_after_run=False)


class TwoUpdateDQN(DQNPolicy):
    """Two updates per forward, reported as a list of two log dicts (the way PPO-style policies report)."""

    def _forward_learn(self, data):
        return [super()._forward_learn(data), super()._forward_learn(data)]


def _learner(workdir, train_iterations=4, policy_cls=None):
    if policy_cls is None:
        policy = create_policy(policy_config(), enable_field=['learn'])
    else:
        policy = policy_cls(EasyDict(policy_config()), enable_field=['learn'])
    learner = BaseLearner(
        dict(train_iterations=train_iterations, hook=NO_HOOKS),
        policy=policy.learn_mode,
        exp_name='hooks',
        instance_name='learner0',
    )
    sent = {'policy': [], 'info': []}
    learner.send_policy = lambda state: sent['policy'].append(state['iter'])
    learner.send_learn_info = lambda info: sent['info'].append(dict(info))
    return learner, sent


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_send_policy_before_run_and_every_freq_iterations(workdir):
    learner, sent = _learner(workdir)
    learner.register_hook(SendPolicyHook('send_policy_before_run', 100, position='before_run'))
    learner.register_hook(SendPolicyHook('send_policy', 100, position='after_iter', ext_args=EasyDict(freq=2)))
    learner.call_hook('before_run')
    for i in range(5):
        learner.train(dqn_samples(4, seed=i))
    # Weights of 0 updates (before the run), then after updates 2 and 4.
    assert sent['policy'] == [0, 2, 4]
    learner.close()


def test_gated_learn_info_once_per_train_call_with_done_flag(workdir):
    learner, sent = _learner(workdir, train_iterations=3, policy_cls=TwoUpdateDQN)
    gate = LearnInfoGate()
    learner.register_hook(SendLearnInfoHook('mark', 0, position='before_iter', ext_args=EasyDict(gate=gate)))
    learner.register_hook(SendLearnInfoHook('send', 15, position='after_iter', ext_args=EasyDict(gate=gate)))
    for i in range(3):
        learner.train(dqn_samples(4, seed=i))
    # Six updates in three calls: one learn info per call, the third (= train_iterations) marked done.
    assert learner.train_iter == 6
    assert [i['learner_step'] for i in sent['info']] == [0, 2, 4]
    assert [i['learner_done'] for i in sent['info']] == [False, False, True]
    learner.close()


def test_ungated_learn_info_every_freq_iterations(workdir):
    learner, sent = _learner(workdir)
    learner.register_hook(SendLearnInfoHook('send', 15, position='after_iter', ext_args=EasyDict(freq=2)))
    for i in range(4):
        learner.train(dqn_samples(4, seed=i))
    assert [i['learner_step'] for i in sent['info']] == [1, 3]
    learner.close()


def test_hook_positions_are_checked():
    with pytest.raises(ValueError, match='before_run or after_iter'):
        SendPolicyHook('p', 100, position='before_iter')
    with pytest.raises(ValueError, match='runs at'):
        SendLearnInfoHook('i', 100, position='before_iter')  # a before_iter instance needs a gate
    with pytest.raises(ValueError, match='positive integer'):
        SendPolicyHook('p', 100, position='after_iter', ext_args=EasyDict(freq=0))
    with pytest.raises(TypeError, match='LearnInfoGate'):
        SendLearnInfoHook('i', 100, position='after_iter', ext_args=EasyDict(gate=object()))
