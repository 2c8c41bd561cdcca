"""The coordinator's side of run control and resume: tunes forwarded to the learner or applied to the pacing,
keys parallel mode has no use for refused, and the counters a resumed run continues from."""

import json
import os

import pytest

from ding.policy import DQNPolicy, PPOPolicy
from ding.service.hooks import ServiceRuntime, register_batch_size_attribute, register_loss_weights
from ding.service.run_control import RunControl, TuneError
from ding.worker.coordinator.coordinator import STATE_FILE, Coordinator

MODEL = dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[16, 16])


def test_learner_side_applies_forwarded_loss_weights_and_batch_size_to_the_policy():
    ppo = PPOPolicy(
        dict(
            type='ppo',
            model=dict(MODEL, actor_head_hidden_size=16, critic_head_hidden_size=16),
            learn=dict(batch_size=16, learning_rate=3e-3),
        ),
        enable_field=['learn'],
    )
    control = RunControl()
    assert register_loss_weights(control, ppo.learn_mode) == ['entropy_weight', 'value_weight']
    register_batch_size_attribute(control, ppo.learn_mode)
    control.request_tune({'entropy_weight': 0.05, 'value_weight': 1.5, 'batch_size': 8}, source='coordinator')
    assert ppo.learn_mode.get_attribute('entropy_weight') != 0.05  # only between iterations
    control.poll(1)
    learn = ppo.learn_mode
    assert (learn.get_attribute('entropy_weight'), learn.get_attribute('value_weight')) == (0.05, 1.5)
    assert learn.get_attribute('batch_size') == 8

    dqn = DQNPolicy(dict(type='dqn', model=dict(MODEL), learn=dict(batch_size=8)), enable_field=['learn'])
    control = RunControl()
    assert register_loss_weights(control, dqn.learn_mode) == []
    with pytest.raises(TuneError, match='entropy_weight') as err:
        control.request_tune({'entropy_weight': 0.1})
    assert err.value.reason == 'not_supported'


def test_tunes_are_checked_forwarded_once_and_kept_for_later_learner_tasks(toy_cluster):
    cluster = toy_cluster(coordinator=dict(max_samples_per_iter=2, pacing_warmup_samples=16))
    coordinator = cluster.coordinator
    runtime = ServiceRuntime(None, 'toy', instance='coordinator', serve_weights=False)
    try:
        coordinator.attach_service(runtime)
        control = runtime.control
        assert {'learning_rate', 'batch_size', 'max_samples_per_iter'} <= set(control.tunable_keys)
        for changes, needle in (
            ({'update_per_collect': 2}, 'update_per_collect'),
            ({'entropy_weight': 0.1}, 'entropy_weight'),
            ({'batch_size': 0}, '[1, 65536]'),
            ({'batch_size': 2000}, 'replay_buffer_size = 1000'),
            ({'max_samples_per_iter': -1}, '(0, 1000000]'),
        ):
            with pytest.raises(TuneError) as err:
                control.request_tune(changes)
            assert needle in err.value.message
        assert coordinator.learner_task_extra('t') is None

        coordinator.train_iter = 10
        open_before = 16 + 2 * 10
        control.request_tune({'batch_size': 8, 'max_samples_per_iter': 5})
        assert coordinator.poll_service() == 'running'
        assert coordinator.learner_task_extra('t') == {'tune': {'batch_size': 8}}
        assert coordinator.learner_task_extra('t') is None  # sent once
        # the budget open now stays as it was; the new rate counts from here
        assert coordinator.data_plane.budget(10) == open_before
        task = {'task_id': 'later', 'policy': {'learn': {'batch_size': 4}}}
        coordinator.run_control.add_service_fields(task)
        assert task['policy']['learn']['batch_size'] == 8
        assert any(e['event'] == 'tune' for e in control.recent_events())
    finally:
        runtime.close()


def test_counters_are_saved_atomically_and_restored_only_when_resuming(toy_cluster):
    cluster = toy_cluster(stop_value=1e9)
    cluster.coordinator.max_train_iter = 20
    summary = cluster.run()
    assert summary['env_step'] > 0
    path = cluster.coordinator.save_state()
    with open(path, encoding='utf-8') as f:
        saved = json.load(f)
    assert path == os.path.join('.', 'toy', STATE_FILE) and not [n for n in os.listdir('toy') if '.tmp' in n]
    assert (saved['env_step'], saved['train_iter']) == (summary['env_step'], summary['train_iter'])

    fresh = Coordinator(cluster.cfg)
    resumed = Coordinator(cluster.cfg, resume='auto')
    try:
        assert fresh.env_step == 0 and fresh.train_iter == 0
        assert resumed.env_step == summary['env_step'] and resumed.train_iter == summary['train_iter']
        # the commander's collect settings (e.g. epsilon) are computed from these env steps
        assert resumed.commander.total_collector_env_step == summary['env_step']
        assert resumed.pushed_samples == summary['pushed_samples']
    finally:
        fresh.close()
        resumed.close()
