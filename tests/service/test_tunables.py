"""Tunables registered through the runtime (``ding.service.tunables``) get their hyperparameter gauge."""

import pytest

from ding.policy import PPOPolicy
from ding.service.metrics import parse_metrics, sample_value
from ding.service.runtime import ServiceRuntime
from ding.service.tunables import register_batch_size_attribute, register_learning_rate, register_loss_weights

MODEL = dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[16, 16])


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rt = ServiceRuntime(dict(enable=True), 'tunables')
    try:
        yield rt
    finally:
        rt.close()


def _gauge(rt, key):
    return sample_value(parse_metrics(rt.metrics.text().decode()), 'learner_hyperparameter', key=key)


def test_every_registered_tunable_has_its_gauge_and_the_gauge_follows_tunes(runtime):
    ppo = PPOPolicy(
        dict(
            type='ppo',
            model=dict(MODEL, actor_head_hidden_size=16, critic_head_hidden_size=16),
            learn=dict(batch_size=16, learning_rate=3e-3),
        ),
        enable_field=['learn'],
    )
    learn = ppo.learn_mode
    assert register_loss_weights(runtime, learn) == ['entropy_weight', 'value_weight']
    register_batch_size_attribute(runtime, learn)
    assert register_learning_rate(runtime, learn) == ['learning_rate']
    keys = ('entropy_weight', 'value_weight', 'batch_size', 'learning_rate')
    assert set(runtime.control.tunable_keys) == set(keys)
    assert _gauge(runtime, 'batch_size') == 16
    assert _gauge(runtime, 'learning_rate') == pytest.approx(3e-3)
    assert _gauge(runtime, 'entropy_weight') == pytest.approx(learn.get_attribute('entropy_weight'))

    runtime.control.request_tune({'batch_size': 8, 'entropy_weight': 0.05}, source='test')
    runtime.control.poll(1)  # tunes apply between iterations
    assert _gauge(runtime, 'batch_size') == 8
    assert _gauge(runtime, 'entropy_weight') == pytest.approx(0.05)
