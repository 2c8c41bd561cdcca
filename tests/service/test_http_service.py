"""The run service over real HTTP on 127.0.0.1: auth, control, metrics, health, errors."""

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ding.interaction import config as interaction_config
from ding.service.http import ServiceServer, serve
from ding.service.metrics import ServiceMetrics, parse_metrics, sample_value
from ding.service.run_control import RunControl
from tests.helpers.service import TrainLoop, session

TOKEN = 'test-token-123'
AUTH = {'Authorization': f'Bearer {TOKEN}'}


@pytest.fixture
def service():
    """A RunControl driven by a small loop thread (one 'iteration' = 5 ms), served with metrics."""
    control = RunControl(stuck_seconds=60)
    lr = {'value': 0.01}
    control.register_tunable('learning_rate', lambda: lr['value'], lambda v: lr.__setitem__('value', v))
    metrics = ServiceMetrics(run_id='run-1', exp_name='exp', config_hash='abc')
    control.add_listener(metrics.control_event)
    metrics.track_hyperparameters(control.getters())

    def step(i):
        if not control.gate(i):
            return False
        time.sleep(0.005)
        control.note_progress(i + 1)
        metrics.observe_iteration(
            i + 1, {'total_loss': 0.5, 'policy_loss': 0.25, 'entropy_loss': 0.7, 'cur_lr': lr['value']}
        )
        metrics.observe_sample(0.001, lag=1.0)
        return True

    loop = TrainLoop(step).start()
    server = serve(control, metrics, token=TOKEN)
    http = session()
    try:
        yield server, control, metrics, http, loop
    finally:
        http.close()
        control.request_terminate()
        loop.stop()
        server.close()


def test_control_endpoints_need_the_token(service):
    server, control, metrics, http, loop = service
    for path in ('/run/pause', '/run/resume', '/run/tune', '/run/terminate'):
        missing = http.post(server.url + path, json={})
        assert missing.status_code == 401, path
        body = missing.json()
        assert body['success'] is False and 'token' in body['message']
        wrong = http.post(server.url + path, json={}, headers={'Authorization': 'Bearer nope'})
        assert wrong.status_code == 403 and wrong.json()['success'] is False
    assert control.state == 'running'  # nothing was done
    other = http.post(server.url + '/run/pause', json={'wait': 5}, headers={'X-Ding-Token': TOKEN})
    assert other.status_code == 200 and other.json()['data']['state'] == 'paused'
    # Read-only endpoints are open.
    assert http.get(server.url + '/run/status').status_code == 200
    events = [e['event'] for e in control.recent_events()]
    assert events.count('auth_failed') == 4


def test_pause_tune_resume_terminate_over_http(service):
    server, control, metrics, http, loop = service
    paused = http.post(server.url + '/run/pause', json={'wait': 10}, headers=AUTH).json()['data']
    assert paused['state'] == 'paused'
    at = paused['paused_at_iteration']
    time.sleep(0.2)
    status = http.get(server.url + '/run/status').json()['data']
    assert status['iteration'] == at and status['state'] == 'paused'
    assert status['tunable'] == {'learning_rate': '(0, 1]'}

    tuned = http.post(server.url + '/run/tune', json={'changes': {'learning_rate': 0.002}}, headers=AUTH)
    assert tuned.status_code == 200
    assert tuned.json()['data']['changes'] == {'learning_rate': {'old': 0.01, 'new': 0.002}}

    bad = http.post(server.url + '/run/tune', json={'changes': {'learning_rate': 7}}, headers=AUTH)
    assert bad.status_code == 422
    body = bad.json()
    assert body['data']['key'] == 'learning_rate' and body['data']['bound'] == '(0, 1]'
    assert 'learning_rate' in body['message'] and '(0, 1]' in body['message']
    unknown = http.post(server.url + '/run/tune', json={'changes': {'gamma': 0.9}}, headers=AUTH)
    assert unknown.status_code == 400 and "unknown tune key 'gamma'" in unknown.json()['message']
    no_changes = http.post(server.url + '/run/tune', json={'learning_rate': 0.1}, headers=AUTH)
    assert no_changes.status_code == 400 and 'changes' in no_changes.json()['message']

    assert http.post(server.url + '/run/resume', headers=AUTH).json()['data']['state'] == 'running'
    end = time.time() + 10
    while control.iteration <= at + 2 and time.time() < end:
        time.sleep(0.01)
    assert control.iteration > at + 2

    done = http.post(server.url + '/run/terminate', json={'wait': 10}, headers=AUTH).json()['data']
    assert done['state'] == 'terminated'
    loop.join(10)
    assert not loop.alive
    again = http.post(server.url + '/run/pause', headers=AUTH)
    assert again.status_code == 409 and again.json()['data']['state'] == 'terminated'


def test_metrics_parse_as_prometheus_text(service):
    server, control, metrics, http, loop = service
    end = time.time() + 10
    while control.iteration < 5 and time.time() < end:
        time.sleep(0.01)
    http.post(server.url + '/run/pause', json={'wait': 10}, headers=AUTH)
    http.post(server.url + '/run/tune', json={'changes': {'learning_rate': 0.003}}, headers=AUTH)
    metrics.nan_guard_event('skipped_step', 2)  # what the NaN guard's listener calls
    response = http.get(server.url + '/metrics')
    assert response.status_code == 200 and response.headers['Content-Type'].startswith('text/plain')
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    for name in (
        'learner_sgd_steps',
        'learner_policy_loss',
        'learner_value_loss',
        'learner_entropy',
        'learner_sample_latency_seconds',
        'learner_checkpoint_duration_seconds',
        'learner_weights_publish',
        'learner_last_step_timestamp_seconds',
        'prefetch_queue_size',
        'collector_env_steps',
        'policy_lag',
        'nan_guard_events',
        'run_control_events',
        'run_state',
        'learner_hyperparameter',
        'ding_run_info',
    ):
        assert name in families, name
    assert families['policy_lag'].type == 'histogram'
    parsed = parse_metrics(response.text)
    steps = sample_value(parsed, 'learner_sgd_steps_total')
    assert steps == control.iteration  # paused: the counter and the loop agree
    assert sample_value(parsed, 'learner_policy_loss') == 0.25
    assert sample_value(parsed, 'learner_entropy') == 0.7
    assert sample_value(parsed, 'nan_guard_events_total', kind='skipped_step') == 2
    assert sample_value(parsed, 'run_control_events_total', event='tune') == 1
    assert sample_value(parsed, 'run_state', run_state='paused') == 1
    assert sample_value(parsed, 'learner_hyperparameter', key='learning_rate') == 0.003
    assert (
        sample_value(parsed, 'ding_run_info', config_hash='abc', exp_name='exp', run_id='run-1', worker='learner') == 1
    )
    assert sample_value(parsed, 'policy_lag_count') == steps


def test_healthz_turns_503_when_the_loop_stops_advancing():
    control = RunControl(stuck_seconds=0.3)
    server = serve(control, token=TOKEN)
    http = session()
    try:
        control.note_progress(1)
        ok = http.get(server.url + '/healthz')
        assert ok.status_code == 200 and ok.json()['data']['status'] == 'ok'
        time.sleep(0.5)
        stuck = http.get(server.url + '/healthz')
        assert stuck.status_code == 503
        body = stuck.json()
        assert body['data']['status'] == 'stuck' and 'bound 0.3 s' in body['message']
        control.request_pause()
        control.poll(1)  # the loop reaches its gate: paused on purpose is healthy
        paused = http.get(server.url + '/healthz')
        assert paused.status_code == 200 and paused.json()['data']['status'] == 'paused'
    finally:
        http.close()
        server.close()


def test_errors_are_json_envelopes():
    control = RunControl()
    server = ServiceServer(port=0, token=TOKEN, control=control)
    server.start()
    http = session()
    try:
        nope = http.get(server.url + '/nope')
        assert nope.status_code == 404 and nope.json()['success'] is False
        method = http.get(server.url + '/run/pause')
        assert method.status_code == 405
        garbage = http.post(server.url + '/run/pause', data=b'{not json', headers=AUTH)
        assert garbage.status_code == 400 and 'not valid JSON' in garbage.json()['message']
        array = http.post(server.url + '/run/pause', json=[1, 2], headers=AUTH)
        assert array.status_code == 400
        wait = http.post(server.url + '/run/pause', json={'wait': -1}, headers=AUTH)
        assert wait.status_code == 400 and "'wait'" in wait.json()['message']
        # Parts not given are not mounted.
        assert http.get(server.url + '/metrics').status_code == 404
        assert http.get(server.url + '/weights/current').status_code == 404
    finally:
        http.close()
        server.close()
    with pytest.raises(ValueError):
        ServiceServer(port=0, control=control)  # control without a token is refused


def test_control_bodies_are_bounded_in_size_and_depth(service):
    server, control, metrics, http, loop = service
    big = {'wait': 1, 'pad': 'x' * interaction_config.MAX_CONTROL_REQUEST_BYTES}
    too_large = http.post(server.url + '/run/pause', json=big, headers=AUTH)
    assert too_large.status_code == 413 and too_large.json()['success'] is False
    deep = '{"a":' * 100 + '1' + '}' * 100
    too_deep = http.post(server.url + '/run/tune', data=deep, headers={**AUTH, 'Content-Type': 'application/json'})
    assert too_deep.status_code == 400 and 'nested deeper' in too_deep.json()['message']
    recursion = http.post(server.url + '/run/tune', data='[' * 30_000 + ']' * 30_000, headers=AUTH)
    assert recursion.status_code == 400
    assert control.state == 'running'  # nothing was done
    assert http.get(server.url + '/ping').status_code == 200
