"""End to end: a real ``ding -m serial`` CartPole DQN run driven over HTTP (pause, tune, resume, terminate)."""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from ding.service.json_log import read_events
from ding.service.metrics import parse_metrics, sample_value
from ding.utils.checkpoint import read_manifest
from tests.helpers.processes import child_env
from tests.helpers.service import session
from tests.helpers.wait import wait_until

CONFIG = textwrap.dedent("""
    from easydict import EasyDict
    main_config = EasyDict(dict(
        exp_name='ctl_exp',
        env=dict(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1, stop_value=1e9),
        policy=dict(
            cuda=False,
            model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[32, 32]),
            learn=dict(batch_size=16, learning_rate=0.001, update_per_collect=2,
                       learner=dict(hook=dict(log_show_after_iter=1000, save_ckpt_after_iter=100000))),
            collect=dict(n_sample=8),
            eval=dict(evaluator=dict(eval_freq=1000000)),
            other=dict(eps=dict(type='exp', start=0.95, end=0.1, decay=10000),
                       replay_buffer=dict(replay_buffer_size=2000)),
        ),
        service=dict(enable=True, json_log=True, json_log_every=0, health_stuck_seconds=120),
    ))
    create_config = EasyDict(dict(
        env=dict(type='cartpole', import_names=['dizoo.classic_control.cartpole.envs.cartpole_env']),
        env_manager=dict(type='base'),
        policy=dict(type='dqn'),
        replay_buffer=dict(type='deque'),
    ))
""")


@pytest.mark.slow
def test_pause_tune_resume_terminate_a_live_serial_run(tmp_path):
    (tmp_path / 'cfg.py').write_text(CONFIG)
    env = child_env(DING_PROGRESS='0', OMP_NUM_THREADS='1')
    log = open(tmp_path / 'run.log', 'wb')
    proc = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'serial', '-c', 'cfg.py', '-s', '0'],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    http = session()
    try:
        run_file = tmp_path / 'ctl_exp' / 'run.json'
        wait_until(run_file.exists, 300, what='run.json', proc=proc)
        assert stat.S_IMODE(os.stat(run_file).st_mode) == 0o600
        info = json.loads(run_file.read_text())
        url, auth = info['url'], {'Authorization': f'Bearer {info["token"]}'}
        assert info['address'].startswith('127.0.0.1:')

        def status():
            return http.get(url + '/run/status', timeout=30).json()['data']

        def metrics():
            return parse_metrics(http.get(url + '/metrics', timeout=30).text)

        wait_until(lambda: status()['iteration'] >= 5, 300, what='the first iterations', proc=proc)

        # Pause: the in-flight iteration drains, then nothing advances; health stays 200 (paused on purpose).
        paused = http.post(url + '/run/pause', json={'wait': 120}, headers=auth, timeout=150).json()['data']
        assert paused['state'] == 'paused'
        at = paused['paused_at_iteration']
        beat = sample_value(metrics(), 'learner_heartbeat_timestamp_seconds')
        time.sleep(1.5)
        assert status()['iteration'] == at
        assert sample_value(metrics(), 'learner_heartbeat_timestamp_seconds') > beat  # heartbeats go on
        health = http.get(url + '/healthz', timeout=30)
        assert health.status_code == 200 and health.json()['data']['status'] == 'paused'
        assert sample_value(metrics(), 'learner_sgd_steps_total') == at

        # Tune while paused: applied at once (between iterations); out of range: 4xx naming key and bound.
        tuned = http.post(
            url + '/run/tune',
            json={'changes': {'learning_rate': 0.0005, 'update_per_collect': 3}},
            headers=auth,
            timeout=60,
        )
        assert tuned.status_code == 200 and tuned.json()['data']['applied'] is True
        assert status()['hyperparameters']['learning_rate'] == 0.0005
        bad = http.post(url + '/run/tune', json={'changes': {'learning_rate': 5.0}}, headers=auth, timeout=30)
        assert bad.status_code == 422
        assert bad.json()['data']['key'] == 'learning_rate' and bad.json()['data']['bound'] == '(0, 1]'
        assert 'learning_rate' in bad.json()['message'] and '(0, 1]' in bad.json()['message']
        wrong = http.post(url + '/run/resume', headers={'Authorization': 'Bearer not-the-token'}, timeout=30)
        assert wrong.status_code == 403 and wrong.json()['success'] is False
        assert status()['state'] == 'paused'

        # Resume: training continues from the paused iteration.
        assert http.post(url + '/run/resume', headers=auth, timeout=30).json()['data']['state'] == 'running'
        wait_until(lambda: status()['iteration'] >= at + 6, 300, what='iterations after resume', proc=proc)
        again = http.post(url + '/run/pause', json={'wait': 120}, headers=auth, timeout=150).json()['data']
        later = again['paused_at_iteration']
        parsed = metrics()
        # One counted SGD step per learner iteration since the start: none lost, none repeated.
        assert sample_value(parsed, 'learner_sgd_steps_total') == later
        assert sample_value(parsed, 'learner_learning_rate') == 0.0005  # cur_lr of iterations after the tune
        assert sample_value(parsed, 'run_control_events_total', event='tune') == 1
        assert sample_value(parsed, 'collector_env_steps_total') > 0

        # Terminate: final checkpoint, clean exit.
        done = http.post(url + '/run/terminate', json={'wait': 120}, headers=auth, timeout=150).json()['data']
        assert done['state'] == 'terminated'
        checkpoint = done['result']['checkpoint']
        assert proc.wait(timeout=300) == 0
        path = tmp_path / checkpoint
        assert path.exists() and read_manifest(str(path))['last_iter'] == later
        assert not run_file.exists()

        events = read_events(str(tmp_path / 'ctl_exp' / 'log' / 'events.jsonl'))
        names = [e['event'] for e in events]
        for name in (
            'run_start',
            'service_started',
            'pause_requested',
            'paused',
            'tune',
            'tune_rejected',
            'resume',
            'terminate_requested',
            'terminated',
            'run_end',
        ):
            assert name in names, name
        resume = next(e for e in events if e['event'] == 'resume')
        assert resume['paused_at_iteration'] == at and resume['iteration'] == at
        assert events[-1]['event'] == 'run_end' and events[-1]['reason'] == 'terminated'
        assert len({e['run_id'] for e in events}) == 1
        assert 'not solved (terminated)' in (tmp_path / 'run.log').read_text()
    finally:
        http.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
