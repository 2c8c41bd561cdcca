"""The run service on a live async pipeline: status, metrics (policy lag, trajectory queue), weights, pause,
tune, resume and terminate over HTTP, with the run in a thread of this process."""

import json
import threading

from ding.entry import async_pipeline
from ding.service.metrics import parse_metrics, sample_value
from ding.utils.checkpoint import read_manifest
from tests.helpers.async_configs import cartpole_impala
from tests.helpers.service import session
from tests.helpers.wait import wait_until


def test_a_live_async_run_is_controlled_and_measured_over_http(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    cfg = cartpole_impala(
        'served',
        async_actor=dict(actor_num=2, env_per_actor=4, unroll_len=10, trajectory_queue_size=4),
        eval=dict(evaluator=dict(eval_freq=0)),
        service=dict(enable=True, json_log=True, json_log_every=0, weights_freq=5),
    )
    errors = []

    def run():
        try:
            async_pipeline(cfg, seed=0)
        except BaseException as exc:  # reported by the assertions below
            errors.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    http = session()
    run_file, url = tmp_path / 'served' / 'run.json', ''
    try:
        wait_until(lambda: run_file.exists() or errors, 120, what='run.json')
        assert not errors, errors
        info = json.loads(run_file.read_text())
        url, auth = info['url'], {'Authorization': f'Bearer {info["token"]}'}

        def status():
            return http.get(url + '/run/status', timeout=30).json()['data']

        wait_until(lambda: status()['iteration'] >= 10, 120, what='ten iterations')
        metrics = parse_metrics(http.get(url + '/metrics', timeout=30).text)
        assert sample_value(metrics, 'policy_lag_count') > 0
        assert sample_value(metrics, 'policy_lag_max') >= sample_value(metrics, 'policy_lag_min') >= 0
        assert sample_value(metrics, 'collector_env_steps_total') > 0
        assert sample_value(metrics, 'async_dropped_trajectories') == 0
        assert 0 <= sample_value(metrics, 'prefetch_queue_size') <= 4
        assert http.get(url + '/weights/meta', timeout=30).status_code == 200

        paused = http.post(url + '/run/pause', json={'wait': 60}, headers=auth, timeout=90).json()['data']
        assert paused['state'] == 'paused'
        at = paused['paused_at_iteration']
        tuned = http.post(
            url + '/run/tune', json={'changes': {'learning_rate': 0.0003}}, headers=auth, timeout=30
        ).json()['data']
        assert tuned['applied'] is True
        threading.Event().wait(0.5)
        assert status()['iteration'] == at  # the actors fill the queue and wait; the learner does not train
        assert http.post(url + '/run/resume', headers=auth, timeout=30).json()['data']['state'] == 'running'
        wait_until(lambda: status()['iteration'] >= at + 5, 120, what='iterations after resume')

        done = http.post(url + '/run/terminate', json={'wait': 60}, headers=auth, timeout=90).json()['data']
        assert done['state'] == 'terminated'
        runner.join(60)
        assert not runner.is_alive() and not errors, errors
        assert not [t for t in threading.enumerate() if t.name.startswith('ding-actor-')]
        checkpoint = tmp_path / done['result']['checkpoint']
        assert read_manifest(str(checkpoint))['last_iter'] == done['result']['checkpoint_iteration']
        assert not run_file.exists()
        assert 'not solved (terminated)' in capsys.readouterr().err
    finally:
        if runner.is_alive() and run_file.exists():  # a failed assertion: stop the run all the same
            token = json.loads(run_file.read_text())['token']
            http.post(url + '/run/terminate', headers={'Authorization': f'Bearer {token}'}, timeout=30)
        http.close()
        runner.join(60)
