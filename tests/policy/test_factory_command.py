import math

import pytest
from easydict import EasyDict

from ding.policy import (
    A2CPolicy,
    DQNCommandModePolicy,
    DQNPolicy,
    PPOCommandModePolicy,
    PPOPolicy,
    create_policy,
    get_policy_cls,
)
from ding.utils.registry import POLICY_REGISTRY

MODEL = dict(obs_shape=4, action_shape=2)


@pytest.mark.parametrize(
    'name,cls',
    [
        ('dqn', DQNPolicy),
        ('ppo', PPOPolicy),
        ('a2c', A2CPolicy),
        ('dqn_command', DQNCommandModePolicy),
        ('ppo_command', PPOCommandModePolicy),
    ],
)
def test_registry_names_build_their_policy(name, cls):
    assert get_policy_cls(dict(type=name)) is cls
    policy = create_policy(EasyDict(type=name, model=dict(MODEL)))
    assert type(policy) is cls
    assert set(policy.command_mode.get_setting_learn({'learner_step': 0, 'envstep': 0})) == set()


def test_unknown_type_and_missing_type_are_reported():
    with pytest.raises(KeyError, match='dqnn'):
        create_policy(dict(type='dqnn'))
    with pytest.raises(KeyError, match="'type'"):
        create_policy(dict(model=MODEL))
    assert {'dqn', 'ppo', 'a2c', 'dqn_command', 'ppo_command', 'a2c_command'} <= set(POLICY_REGISTRY.query())


def test_dqn_command_turns_env_steps_into_epsilon():
    policy = create_policy(
        dict(type='dqn_command', other=dict(eps=dict(type='exp', start=0.9, end=0.1, decay=100))),
        enable_field=['command'],
    )
    get = policy.command_mode.get_setting_collect
    assert get({'learner_step': 5, 'envstep': 0}) == {'eps': pytest.approx(0.9)}
    assert get({'learner_step': 5, 'envstep': 100})['eps'] == pytest.approx(0.1 + 0.8 * math.exp(-1))
    linear = create_policy(
        dict(type='dqn_command', other=dict(eps=dict(type='linear', start=1.0, end=0.0, decay=10))),
        enable_field=['command'],
    )
    assert linear.command_mode.get_setting_collect({'learner_step': 0, 'envstep': 5})['eps'] == pytest.approx(0.5)
    assert linear.command_mode.get_setting_collect({'learner_step': 0, 'envstep': 50})['eps'] == 0.0


def test_on_policy_command_settings_are_empty():
    policy = create_policy(dict(type='ppo_command', model=MODEL), enable_field=['command'])
    assert policy.command_mode.get_setting_collect({'learner_step': 1, 'envstep': 10}) == {}


def test_user_config_is_merged_over_defaults():
    policy = create_policy(dict(type='dqn', model=MODEL, learn=dict(batch_size=7)), enable_field=['learn'])
    assert policy.learn_mode.get_attribute('cfg').learn.batch_size == 7
    assert policy.learn_mode.get_attribute('cfg').learn.learning_rate == 0.001
