"""The run-control state machine, driven by a real learner training a DQN policy in a thread."""

import threading
import time

import pytest

from ding.config.interval import Interval
from ding.service.hooks import RunControlHook, ServiceRuntime
from ding.service.run_control import (
    RunControl,
    RunStateError,
    TuneError,
    canonical_key,
    check_tune_value,
    tune_bounds,
)
from ding.worker.learner import BaseLearner
from ding.worker.learner.learner_hook import iterations_done
from tests.helpers.service import TrainLoop, learner_cfg, make_batch, make_dqn_policy
from tests.helpers.wait import wait_until


@pytest.fixture
def learner_loop(tmp_path, monkeypatch):
    """A real BaseLearner (DQN) with the run-control hook; training runs in a thread until terminated."""
    monkeypatch.chdir(tmp_path)
    made = []

    def make():
        policy = make_dqn_policy()
        learner = BaseLearner(learner_cfg(), policy.learn_mode, exp_name='rc_exp')
        runtime = ServiceRuntime({}, 'rc_exp', log=learner.info)
        terminated = threading.Event()
        runtime.attach_learner(learner, control_hook=True, on_terminate=lambda engine: terminated.set())

        def step(i):
            learner.train(make_batch(i))
            return not terminated.is_set()  # the loop's owner stops where the hook says so

        loop = TrainLoop(step)
        made.append((learner, runtime, loop))
        return learner, runtime.control, loop

    yield make
    for learner, runtime, loop in made:
        if runtime.control.state not in ('terminated', 'finished'):
            runtime.control.request_terminate()  # unblocks a paused hook
        loop.stop()
        runtime.close()
        learner.close()


def test_tune_bounds_come_from_the_config_bounds_narrowed_for_live_changes():
    bounds = tune_bounds()
    assert str(bounds['learning_rate'][1]) == '(0, 1]'  # config: (0, inf), narrowed to (0, 1]
    assert bounds['batch_size'][0] == 'int' and str(bounds['batch_size'][1]) == '[1, 65536]'
    assert str(bounds['eps.start'][1]) == '[0, 1]'
    assert str(Interval.parse('(0, inf)').intersect(Interval.parse('[0, 1]'))) == '(0, 1]'
    assert canonical_key('policy.learn.learning_rate') == 'learning_rate'
    assert canonical_key('policy.other.eps.end') == 'eps.end'
    assert check_tune_value('update_per_collect', 4.0) == 4 and isinstance(check_tune_value('batch_size', 8.0), int)


@pytest.mark.parametrize(
    'key, value, reason, needle',
    [
        ('learning_rate', 0.0, 'out_of_range', 'learning_rate = 0.0 is out of range: must be in (0, 1]'),
        ('learning_rate', 3, 'out_of_range', 'must be in (0, 1]'),
        ('learning_rate', float('nan'), 'out_of_range', 'learning_rate'),
        ('batch_size', 2.5, 'wrong_type', 'batch_size: expected an integer'),
        ('batch_size', True, 'wrong_type', 'expected an integer'),
        ('entropy_weight', '0.1', 'wrong_type', 'expected a number'),
        ('lr', 0.1, 'unknown_key', "unknown tune key 'lr'"),
    ],
)
def test_check_tune_value_names_key_and_bound(key, value, reason, needle):
    with pytest.raises(TuneError) as info:
        check_tune_value(key, value)
    assert info.value.reason == reason and needle in str(info.value)
    if reason != 'unknown_key':
        assert info.value.key == key and info.value.bound


def test_pause_drains_then_blocks_resume_continues_without_lost_or_repeated_iterations(learner_loop):
    learner, control, loop = learner_loop()
    loop.start()
    wait_until(lambda: learner.train_iter >= 3, what='first iterations')
    out = control.request_pause(wait=30)
    assert out['state'] == 'paused'
    paused_at = out['paused_at_iteration']
    # The iteration in flight finished (the loop waits at its end); no further one starts while paused.
    assert iterations_done(learner) == paused_at == control.iteration
    calls_when_paused = loop.iterations
    time.sleep(0.5)
    assert iterations_done(learner) == paused_at and loop.iterations == calls_when_paused
    healthy, body = control.health()
    assert healthy and body['status'] == 'paused'
    assert control.status()['heartbeat_age_seconds'] < 1.0  # heartbeats go on while paused

    assert control.request_resume()['state'] == 'running'
    wait_until(lambda: learner.train_iter >= paused_at + 3, what='training after resume')
    # Every train() call ran exactly one iteration: the one held at pause was neither lost nor repeated.
    control.request_pause(wait=30)
    assert iterations_done(learner) == loop.iterations + 1  # + the call being held in its after_iter
    events = [e['event'] for e in control.recent_events()]
    assert events[:4] == ['pause_requested', 'paused', 'resume', 'pause_requested']


def test_tune_is_validated_at_once_and_applied_between_iterations(learner_loop):
    learner, control, loop = learner_loop()
    optimizer = learner.policy.get_attribute('optimizer')
    assert control.tunable_keys == ['learning_rate']  # DQN in a bare learner: no entropy/value weights
    loop.start()
    wait_until(lambda: learner.train_iter >= 2, what='first iterations')
    result = control.request_tune({'policy.learn.learning_rate': 0.0005}, wait=30)
    assert result['applied'] is True
    assert result['changes'] == {'learning_rate': {'old': 0.001, 'new': 0.0005}}
    assert all(g['lr'] == 0.0005 for g in optimizer.param_groups)
    wait_until(lambda: learner.train_iter >= result['iteration'] + 2, what='iterations after the tune')
    assert control.hyperparameters() == {'learning_rate': 0.0005}

    with pytest.raises(TuneError) as info:
        control.request_tune({'learning_rate': 2.0, 'entropy_weight': 0.1})
    problems = {p['key']: p['reason'] for p in info.value.problems}
    assert problems == {'learning_rate': 'out_of_range', 'entropy_weight': 'not_supported'}
    assert all(g['lr'] == 0.0005 for g in optimizer.param_groups)  # nothing of a refused request applies
    assert control.recent_events()[-1]['event'] == 'tune_rejected'


def test_terminate_runs_the_final_action_once_and_stops_the_loop(learner_loop):
    learner, control, loop = learner_loop()
    finals = []
    control.on_terminate = lambda: finals.append(iterations_done(learner)) or {'checkpoint': 'final'}
    loop.start()
    wait_until(lambda: learner.train_iter >= 2, what='first iterations')
    control.request_pause(wait=30)
    out = control.request_terminate(wait=30)  # a paused loop wakes up to terminate
    assert out['state'] == 'terminated' and out['result'] == {'checkpoint': 'final'}
    loop.join(30)
    assert not loop.alive  # stopped right after the iteration the final action saw
    assert finals == [control.iteration] == [learner.train_iter]
    with pytest.raises(RunStateError):
        control.request_pause()
    with pytest.raises(RunStateError):
        control.request_tune({'learning_rate': 0.01})
    assert control.request_terminate()['state'] == 'terminated'  # idempotent
    assert finals == [control.iteration]


def test_gate_returns_false_after_terminate_and_health_reports_a_stuck_loop():
    control = RunControl(stuck_seconds=0.2)
    assert control.gate(0) is True
    healthy, body = control.health()
    assert healthy and body['status'] == 'starting'
    time.sleep(0.3)
    healthy, body = control.health()
    assert not healthy and body['status'] == 'stuck' and 'bound 0.2 s' in body['reason']
    control.note_progress(1)
    assert control.health()[0]
    control.request_terminate()
    assert control.gate(1) is False and control.state == 'terminated'
    control.mark_finished('done')  # already terminated: stays terminated
    assert control.state == 'terminated'


def test_run_control_hook_calls_on_terminate_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    policy = make_dqn_policy()
    learner = BaseLearner(learner_cfg(), policy.learn_mode, exp_name='hook_exp')
    control = RunControl()
    stopped = []
    learner.register_hook(
        RunControlHook(control=control, on_terminate=lambda engine: stopped.append(iterations_done(engine)))
    )
    try:
        learner.train(make_batch(0))
        control.request_terminate()
        learner.train(make_batch(1))  # terminate is honoured at the end of this iteration
        learner.train(make_batch(2))
        assert stopped == [2]
    finally:
        learner.close()


def test_a_stalled_checkpoint_store_shows_in_health_status_and_metrics(tmp_path):
    """A learner whose ckpt_uri cannot be written (a file stands where the directory should be): the run stays
    healthy but reports checkpoint_stalled, in /healthz's body, /run/status and the metric."""
    (tmp_path / 'blocked').write_text('a file, not a directory')
    cfg = dict(learner_cfg(), checkpoint=dict(ckpt_uri=str(tmp_path / 'blocked'), upload_retries=0, retry_seconds=0.05))
    learner = BaseLearner(cfg, exp_name=str(tmp_path / 'exp'))
    learner.policy = make_dqn_policy().learn_mode
    runtime = ServiceRuntime(dict(enable=True), str(tmp_path / 'exp'))
    try:
        runtime.attach_learner(learner)
        learner.train(make_batch(0))
        learner.save_checkpoint()
        wait_until(lambda: runtime.control.health()[1]['status'] == 'checkpoint_stalled', 30, what='checkpoint_stalled')
        healthy, body = runtime.control.health()
        assert healthy and str(tmp_path / 'blocked') in body['reason'] and body['checkpoint']['pending'] == 1
        assert runtime.control.status()['checkpoint']['stalled'] is True
        assert 'checkpoint_stalled' in [e['event'] for e in runtime.control.status()['events']]
        assert b'learner_checkpoint_stalled 1.0' in runtime.metrics.text()
    finally:
        runtime.close()
        learner.checkpoint_uploader.close(timeout=0)
        learner.close()
