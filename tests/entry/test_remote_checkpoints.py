"""End to end: a real ``ding -m serial`` CartPole DQN run storing its checkpoints in S3 (a moto server on 127.0.0.1)
through an outage of the store, then ``--resume auto`` from the bucket in a fresh directory."""

import json
import subprocess
import sys
import textwrap
import uuid

import pytest

from ding.service.metrics import parse_metrics, sample_value
from ding.utils.checkpoint import read_manifest
from tests.helpers.moto_s3 import BUCKET, endpoint_guard, s3  # noqa: F401 - the fixture
from tests.helpers.processes import child_env
from tests.helpers.service import session
from tests.helpers.wait import wait_until

CONFIG = textwrap.dedent("""
    from easydict import EasyDict
    main_config = EasyDict(dict(
        exp_name='remote_exp',
        env=dict(collector_env_num=1, evaluator_env_num=1, n_evaluator_episode=1, stop_value=1e9),
        policy=dict(
            cuda=False,
            model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[16, 16]),
            learn=dict(batch_size=8, learning_rate=0.001, update_per_collect=1,
                       learner=dict(hook=dict(log_show_after_iter=1000, save_ckpt_after_iter=100000),
                                    checkpoint=dict(ckpt_uri={uri!r}, every_env_steps=16, keep_n=2,
                                                    compression='zstd', upload_retries=1, retry_seconds=0.1))),
            collect=dict(n_sample=8),
            eval=dict(evaluator=dict(eval_freq=1000000)),
            other=dict(eps=dict(type='exp', start=0.95, end=0.1, decay=10000),
                       replay_buffer=dict(replay_buffer_size=500)),
        ),
        service=dict(enable=True, health_stuck_seconds=120),
    ))
    create_config = EasyDict(dict(
        env=dict(type='cartpole', import_names=['dizoo.classic_control.cartpole.envs.cartpole_env']),
        env_manager=dict(type='base'),
        policy=dict(type='dqn'),
        replay_buffer=dict(type='naive'),
    ))
""")


def _ding(cwd, *args: str, **popen) -> subprocess.Popen:
    endpoint_guard_env = child_env(DING_PROGRESS='0', OMP_NUM_THREADS='1')
    return subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'serial', '-c', 'cfg.py', '-s', '0', *args],
        cwd=cwd, env=endpoint_guard_env, stdout=popen.pop('stdout'), stderr=subprocess.STDOUT,
    )  # fmt: skip


@pytest.mark.slow
def test_a_run_keeps_training_through_an_s3_outage_and_resumes_from_the_bucket(s3, tmp_path):  # noqa: F811
    endpoint_guard(s3)  # the child processes inherit AWS_ENDPOINT_URL: no upload can leave 127.0.0.1
    prefix = uuid.uuid4().hex
    config = CONFIG.format(uri=f's3://{BUCKET}/{prefix}')
    (tmp_path / 'first').mkdir()
    (tmp_path / 'first' / 'cfg.py').write_text(config)
    log = open(tmp_path / 'first.log', 'wb')
    proc = _ding(tmp_path / 'first', stdout=log)
    http = session()
    try:
        run_file = tmp_path / 'first' / 'remote_exp' / 'run.json'
        wait_until(run_file.exists, 120, what='run.json', proc=proc)
        info = json.loads(run_file.read_text())
        url, auth = info['url'], {'Authorization': f'Bearer {info["token"]}'}

        def status():
            return http.get(url + '/run/status', timeout=30).json()['data']

        def metrics():
            return parse_metrics(http.get(url + '/metrics', timeout=30).text)

        wait_until(lambda: status()['checkpoint']['uploaded'] >= 1, 120, what='the first upload', proc=proc)

        s3.stop()  # the outage: uploads fail, the run trains on and says checkpoint_stalled
        wait_until(lambda: status()['checkpoint']['stalled'], 60, what='checkpoint_stalled', proc=proc)
        stalled_at = status()['iteration']
        health = http.get(url + '/healthz', timeout=30)
        assert health.status_code == 200 and health.json()['data']['status'] == 'checkpoint_stalled'
        assert f's3://{BUCKET}/{prefix}' in health.json()['data']['reason']
        assert sample_value(metrics(), 'learner_checkpoint_stalled') == 1
        assert sample_value(metrics(), 'learner_checkpoint_upload_failures_total') >= 2
        wait_until(lambda: status()['iteration'] >= stalled_at + 5, 60, what='training during the outage', proc=proc)

        s3.start()  # same port: uploads resume
        wait_until(lambda: not status()['checkpoint']['stalled'], 60, what='checkpoint_recovered', proc=proc)
        assert sample_value(metrics(), 'learner_checkpoint_stalled') == 0
        assert 'checkpoint_recovered' in [e['event'] for e in status()['events']]

        done = http.post(url + '/run/terminate', json={'wait': 120}, headers=auth, timeout=150).json()['data']
        final_iter = done['result']['checkpoint_iteration']
        assert proc.wait(timeout=120) == 0  # closing flushed the final checkpoint to the store
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()

    latest = json.loads(s3.read(f'{prefix}/latest'))
    assert latest['last_iter'] == final_iter
    manifest = json.loads(s3.read(f'{prefix}/MANIFEST.json'))
    assert manifest['config']['exp_name'].startswith('remote_exp') and manifest['ding_version']
    assert len([e for e in manifest['checkpoints'] if e['kind'] == 'periodic']) == 2  # keep_n
    assert manifest['checkpoints'][-1]['replay_cursor']['last_sampled_ids']

    # A fresh machine: nothing local, --resume auto reads latest from the bucket and continues from it.
    (tmp_path / 'fresh').mkdir()
    (tmp_path / 'fresh' / 'cfg.py').write_text(config)
    with open(tmp_path / 'fresh.log', 'wb') as out:
        again = _ding(tmp_path / 'fresh', '--resume', 'auto', '--train-iter', str(final_iter + 3), stdout=out)
        assert again.wait(timeout=120) == 0
    downloaded = tmp_path / 'fresh' / 'remote_exp' / 'ckpt' / latest['checkpoint'].split('-')[0]
    assert read_manifest(str(downloaded) + '.safetensors')['last_iter'] == final_iter
    assert json.loads(s3.read(f'{prefix}/latest'))['last_iter'] >= final_iter + 3
