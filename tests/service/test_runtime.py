"""ServiceRuntime on a real learner: hooks feed metrics, weights and the JSON event log; run.json; config checks."""

import os
import stat
import time

import pytest

from ding.config import ConfigError
from ding.service import SERVICE_DEFAULTS, check_service_config
from ding.service.hooks import ServiceRuntime, read_run_file
from ding.service.json_log import JsonEventLog, read_events
from ding.service.metrics import parse_metrics, sample_value
from ding.service.weights import WeightsClient, WeightsFollower
from ding.worker.learner import BaseLearner
from ding.worker.learner.nan_guard_settings import publish_event
from tests.helpers.service import TrainLoop, learner_cfg, make_batch, make_dqn_policy, session
from tests.helpers.wait import wait_until


@pytest.fixture
def runtime_learner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = []

    def make(service_cfg, hook_cfg=None):
        policy = make_dqn_policy()
        learner = BaseLearner(learner_cfg(**(hook_cfg or {})), policy.learn_mode, exp_name='svc')
        runtime = ServiceRuntime(service_cfg, 'svc', config_hash='cafe', log=learner.info)
        made.append((learner, runtime))
        runtime.attach_learner(learner)
        runtime.control.on_terminate = lambda: runtime.terminate_with_checkpoint(learner)
        runtime.start_server()
        return learner, runtime

    yield make
    for learner, runtime in made:
        runtime.close()
        learner.close()


def test_hooks_feed_metrics_weights_and_checkpoint_timing(runtime_learner):
    learner, runtime = runtime_learner(dict(enable=True, weights_freq=2), dict(save_ckpt_after_iter=3))
    http = session()
    try:
        learner.call_hook('before_run')
        assert runtime.weights.current().version == 0  # published before the first iteration
        for it in range(6):
            learner.train(make_batch(it, collect_iter=it))
            if it % 2:
                runtime.observe_sample(make_batch(it, collect_iter=it - 1), 0.002, learner.train_iter)
        text = http.get(runtime.server.url + '/metrics').text
        parsed = parse_metrics(text)
        assert sample_value(parsed, 'learner_sgd_steps_total') == 6
        assert sample_value(parsed, 'learner_iteration') == 6
        assert sample_value(parsed, 'learner_total_loss') == sample_value(parsed, 'learner_value_loss')  # DQN
        assert sample_value(parsed, 'learner_learning_rate') == 0.001
        assert sample_value(parsed, 'learner_checkpoint_duration_seconds_count') == 2  # iterations 3 and 6
        assert sample_value(parsed, 'learner_weights_publish_total') == 4  # before_run, 2, 4, 6
        assert sample_value(parsed, 'learner_weights_version') == 6
        assert sample_value(parsed, 'policy_lag_count') == 3
        assert sample_value(parsed, 'learner_samples_total', status='ok') == 3
        assert sample_value(parsed, 'learner_kl') != sample_value(parsed, 'learner_kl')  # NaN: DQN has no KL
        # observe_sample at train_iter 2 on data collected at iteration 0: lag 2, and so on.
        assert sample_value(parsed, 'policy_lag_sum') == (2 - 0) + (4 - 2) + (6 - 4)
        got = WeightsClient(runtime.server.address, accept_unsigned=True).fetch()
        assert got is not None and got[1] == 6

        publish_event('rollback')  # what a learner's NaN guard does on a rollback
        assert (
            sample_value(
                parse_metrics(http.get(runtime.server.url + '/metrics').text), 'nan_guard_events_total', kind='rollback'
            )
            == 1
        )

        out = runtime.control.request_terminate()  # no loop: the final action runs at the next gate
        assert out['state'] == 'terminating'
        assert runtime.gate(learner.train_iter, 123) is False
        result = runtime.control.status()['terminate_result']
        assert result['checkpoint'].endswith('iteration_6.safetensors') and os.path.exists(result['checkpoint'])
    finally:
        http.close()


def test_empty_samples_kl_and_stream_subscribers_are_exported(runtime_learner, monkeypatch):
    monkeypatch.setenv('DING_RUN_SECRET', 'a-run-secret-of-enough-length-0123')
    learner, runtime = runtime_learner(dict(enable=True))
    runtime.observe_sample(None, 0.001, 0)  # the buffer had too little data
    runtime.metrics.observe_iteration(1, {'approx_kl': 0.02, 'policy_loss': 0.5})  # what PPO reports
    follower = WeightsFollower(
        WeightsClient(runtime.server.address, token=runtime.server.token, accept_unsigned=True),
        learner.policy,
        subscribe=True,
    )
    try:
        assert wait_until(lambda: runtime.server.subscribers == 1, 5)
        parsed = parse_metrics(session().get(runtime.server.url + '/metrics').text)
        assert sample_value(parsed, 'learner_samples_total', status='empty') == 1
        assert sample_value(parsed, 'learner_kl') == 0.02
        assert sample_value(parsed, 'learner_weights_stream_subscribers') == 1
    finally:
        follower.close()
    learner.call_hook('before_run')
    assert runtime.weights.signed and runtime.weights.current().signature is not None
    assert session().get(runtime.server.url + '/weights/meta').json()['data']['signed'] is True  # $DING_RUN_SECRET


def test_run_file_is_private_and_removed_on_close(runtime_learner):
    learner, runtime = runtime_learner(dict(enable=True, token='a-fixed-token'))
    path = runtime.run_file
    info = read_run_file(path)
    assert info['token'] == 'a-fixed-token' and info['address'] == runtime.server.address
    assert info['run_id'] == runtime.run_id and info['pid'] == os.getpid()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert runtime.server.host == '127.0.0.1'
    runtime.end_run(False, 'test over')
    runtime.close()
    assert not os.path.exists(path)
    assert runtime.control.state == 'finished'


def test_the_start_up_line_says_where_the_token_is_and_never_shows_it(runtime_learner, capfd):
    # Even with a umask that lets everyone read new files, the run file holding the token is the owner's only.
    umask = os.umask(0)
    try:
        learner, runtime = runtime_learner(dict(enable=True, token='a-fixed-token'))
    finally:
        os.umask(umask)
    err = capfd.readouterr().err
    assert 'a-fixed-token' not in err
    assert f'[ding] run service of learner at {runtime.server.url}; control token in ./svc/run.json' in err
    assert stat.S_IMODE(os.stat(runtime.run_file).st_mode) == 0o600


def test_json_event_log_lines(runtime_learner):
    learner, runtime = runtime_learner(dict(json_log=True, json_log_every=2))
    assert runtime.server is None and runtime.metrics is None  # JSON log only: no server, no prometheus
    for it in range(4):
        learner.train(make_batch(it))
    runtime.control.request_pause()
    runtime.control.poll(learner.train_iter)
    runtime.control.request_resume()
    runtime.end_run(False, 'done')
    runtime.close()
    events = read_events(os.path.join('svc', 'log', 'events.jsonl'))
    names = [e['event'] for e in events]
    assert names == ['train', 'train', 'pause_requested', 'paused', 'resume', 'finished', 'run_end']
    for e in events:
        assert e['run_id'] == runtime.run_id and e['instance'] == 'learner' and e['config_hash'] == 'cafe'
        assert set(e) >= {'time', 'ts', 'iteration', 'event'}
    assert events[0]['iteration'] == 2 and 'total_loss' in events[0] and events[1]['iteration'] == 4
    assert events[3]['paused_at_iteration'] == 4 and events[-1]['reason'] == 'done'
    text = open(os.path.join('svc', 'log', 'learner', 'learner_logger.txt')).read()
    assert '[service] paused' in text  # the human-readable log has the same events


def test_json_event_log_writes_valid_json_for_any_value(tmp_path):
    log = JsonEventLog(str(tmp_path / 'e.jsonl'), 'r', iteration_fn=lambda: 9)
    log.emit('x', value=float('nan'), nested={'a': float('inf'), 'b': [1, 2.5]}, obj=object())
    log.close()
    log.emit('after close is ignored')
    (event,) = read_events(str(tmp_path / 'e.jsonl'))
    assert event['iteration'] == 9 and event['value'] == 'nan' and event['nested'] == {'a': 'inf', 'b': [1, 2.5]}


def test_service_config_checks():
    assert check_service_config(None) == SERVICE_DEFAULTS
    assert check_service_config({'enable': True, 'port': 8080}).port == 8080
    with pytest.raises(ConfigError, match=r"service.enabel \(did you mean 'enable'\?\)"):
        check_service_config({'enabel': True})
    with pytest.raises(ConfigError) as info:
        check_service_config({'port': 70000, 'json_log': 'yes', 'health_stuck_seconds': 0, 'token': 'short'})
    text = str(info.value)
    for key in ('service.port', 'service.json_log', 'service.health_stuck_seconds', 'service.token'):
        assert key in text
    with pytest.raises(ConfigError, match='expected a dict'):
        check_service_config(True)


def test_weights_are_published_on_demand_between_iterations(runtime_learner):
    learner, runtime = runtime_learner(dict(enable=True, weights_freq=0))
    learner.call_hook('before_run')
    loop = TrainLoop(lambda i: learner.train(make_batch(i))).start()
    client = WeightsClient(runtime.server.address, accept_unsigned=True)
    try:
        end = time.time() + 30
        while learner.train_iter < 5 and time.time() < end:
            time.sleep(0.01)
        asked_at = learner.train_iter
        got = client.fetch()
        assert got is not None and got[1] >= asked_at  # not the version-0 snapshot of before_run
        periodic = sample_value(parse_metrics(runtime.metrics.text().decode()), 'learner_weights_publish_total')
        assert periodic == 2  # before_run + this request: nothing was serialised meanwhile
    finally:
        client.close()
        loop.stop()


def test_a_coordinator_style_process_serves_run_control_and_polls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from ding.service.hooks import start_service

    runtime = start_service(dict(enable=True), 'job', instance='coordinator', serve_weights=False)
    rounds = {'n': 4}
    runtime.register_tunable('batch_size', lambda: rounds['n'], lambda v: rounds.__setitem__('n', v))
    http = session()
    try:
        info = read_run_file(os.path.join('job', 'run.json'))
        auth = {'Authorization': f'Bearer {info["token"]}'}
        assert http.get(runtime.server.url + '/weights/current').status_code == 404  # no weights here
        assert runtime.control.poll(0) == 'running'
        assert (
            http.post(runtime.server.url + '/run/pause', json={'wait': 0}, headers=auth).json()['data']['state']
            == 'pausing'
        )
        assert runtime.control.poll(0) == 'paused' and runtime.control.poll(0) == 'paused'  # never blocks
        tuned = http.post(
            runtime.server.url + '/run/tune', json={'changes': {'batch_size': 16}, 'wait': 0}, headers=auth
        ).json()['data']
        assert tuned['applied'] is False  # accepted; applied at the next poll
        assert runtime.control.poll(0) == 'paused' and rounds['n'] == 16
        parsed = parse_metrics(http.get(runtime.server.url + '/metrics').text)
        assert sample_value(parsed, 'learner_hyperparameter', key='batch_size') == 16
        assert (
            sample_value(
                parsed, 'ding_run_info', config_hash='', exp_name='job', run_id=runtime.run_id, worker='coordinator'
            )
            == 1
        )
        http.post(runtime.server.url + '/run/terminate', json={'wait': 0}, headers=auth)
        assert runtime.control.poll(0) == 'terminated'
    finally:
        http.close()
        runtime.close()


def test_prefetch_queue_gauge_follows_the_learner_data_loader(runtime_learner):
    learner, runtime = runtime_learner(dict(enable=True))

    def prefetch():
        return sample_value(parse_metrics(runtime.metrics.text().decode()), 'prefetch_queue_size')

    assert prefetch() == 0  # serial mode: no data loader, the documented 0
    learner.get_data = lambda batch_size: make_batch(0, n=batch_size)  # the parallel learner's data source
    learner.setup_dataloader()
    deadline = time.monotonic() + 30
    while learner.dataloader.queue_size < 2 and time.monotonic() < deadline:  # queue_maxsize defaults to 2
        time.sleep(0.01)
    assert prefetch() == 2


def test_a_rank_of_a_group_offers_no_tunable_key(tmp_path, monkeypatch):
    """Rank 0 of several runs the service alone: a learning rate tuned there would split the ranks."""
    monkeypatch.chdir(tmp_path)
    single = BaseLearner(learner_cfg(), make_dqn_policy().learn_mode, exp_name='one')
    rank0 = BaseLearner(learner_cfg(), make_dqn_policy().learn_mode, exp_name='two', dist_info=(0, 2))
    runtimes = [ServiceRuntime(dict(SERVICE_DEFAULTS, enable=True), name) for name in ('one', 'two')]
    try:
        for runtime, learner in zip(runtimes, (single, rank0)):
            runtime.attach_learner(learner)
        assert runtimes[0].control.tunable_keys == ['learning_rate']
        assert runtimes[1].control.tunable_keys == []
    finally:
        for runtime in runtimes:
            runtime.close()
        single.close()
        rank0.close()
