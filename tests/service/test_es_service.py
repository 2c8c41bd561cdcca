"""The run service on a live ES run (``es_pipeline`` in a thread, its worker processes real): status, the
``es_*`` gauges, pause (no update while paused), resume and terminate over HTTP, workers gone afterwards."""

import copy
import json
import threading

from ding.entry import es_pipeline
from ding.service.metrics import parse_metrics, sample_value
from ding.utils.checkpoint import read_manifest
from dizoo.classic_control.cartpole.config import cartpole_es_config
from tests.helpers.service import session
from tests.helpers.wait import wait_until


def test_a_live_es_run_is_paused_resumed_and_terminated_over_http(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    main = copy.deepcopy(cartpole_es_config.main_config)
    main.exp_name = 'es_served'
    main.env.stop_value = 10**6  # never solved: the run ends by terminate
    main.policy.eval.evaluator.eval_freq = 1000
    main.service = dict(enable=True)
    errors = []

    def run():
        try:
            es_pipeline((main, copy.deepcopy(cartpole_es_config.create_config)), seed=0)
        except BaseException as exc:  # reported by the assertions below
            errors.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    http = session()
    run_file, url = tmp_path / 'es_served' / 'run.json', ''
    try:
        wait_until(lambda: run_file.exists() or errors, 120, what='run.json')
        assert not errors, errors
        info = json.loads(run_file.read_text())
        url, auth = info['url'], {'Authorization': f'Bearer {info["token"]}'}

        def status():
            return http.get(url + '/run/status', timeout=30).json()['data']

        wait_until(lambda: status()['iteration'] >= 2 or errors, 120, what='two ES updates')
        assert not errors, errors
        metrics = parse_metrics(http.get(url + '/metrics', timeout=30).text)
        assert sample_value(metrics, 'es_connected_workers') >= 1  # the second may still be starting
        assert sample_value(metrics, 'es_bytes_sent') > 0
        assert sample_value(metrics, 'es_invalid_packets') == 0

        paused = http.post(url + '/run/pause', json={'wait': 60}, headers=auth, timeout=90).json()['data']
        assert paused['state'] == 'paused'
        at = paused['paused_at_iteration']
        threading.Event().wait(3.0)  # several updates' worth of worker returns arrive meanwhile
        assert status()['iteration'] == at  # no update while paused
        assert http.post(url + '/run/resume', headers=auth, timeout=30).json()['data']['state'] == 'running'
        wait_until(lambda: status()['iteration'] >= at + 2, 120, what='updates after resume')

        done = http.post(url + '/run/terminate', json={'wait': 60}, headers=auth, timeout=90).json()['data']
        assert done['state'] == 'terminated'
        runner.join(60)
        assert not runner.is_alive() and not errors, errors
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
