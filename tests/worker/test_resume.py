"""Resuming after a crash: choosing the checkpoint, what it carries, and real runs that continue."""

import copy
import importlib
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from easydict import EasyDict

from ding.utils.checkpoint import load_checkpoint, read_manifest, save_checkpoint
from ding.utils.checkpoint_settings import CheckpointSettings
from ding.utils.remote_checkpoint import RemoteCheckpoints
from ding.worker.resume import ResumeError, pack_buffer_state, resolve_resume, resume_setting, unpack_buffer_state
from tests.helpers.processes import ROOT, child_env

DQN_CONFIG = os.path.join(ROOT, 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py')
DQN_MODULE = 'dizoo.classic_control.cartpole.config.cartpole_dqn_config'


def write_ckpt(path, last_iter: int) -> str:
    return save_checkpoint(
        path, {'model': {'w': torch.full((3,), float(last_iter))}, 'last_iter': last_iter, 'last_step': 10 * last_iter}
    )


def corrupt(path: str) -> None:
    data = bytearray(open(path, 'rb').read())
    data[-1] ^= 0xFF  # same size, wrong sha256
    open(path, 'wb').write(bytes(data))


# ---- choosing the checkpoint -----------------------------------------------------------------------
def test_setting_comes_from_the_argument_then_the_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = EasyDict(exp_name='exp', resume='auto')
    assert resume_setting(cfg) == 'auto'
    assert resume_setting(cfg, 'never') == 'never'  # the command line wins
    assert resume_setting(EasyDict(exp_name='exp')) == 'never'  # the default
    assert resolve_resume(EasyDict(exp_name='exp'), None) is None
    with pytest.raises(ResumeError, match='resume must be'):
        resume_setting(cfg, 3)


def test_auto_takes_the_newest_checkpoint_that_verifies(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = EasyDict(exp_name='exp')
    assert resolve_resume(cfg, 'auto') is None  # nothing there yet: a fresh start
    write_ckpt('exp/ckpt/iteration_10', 10)
    newest = write_ckpt('exp/ckpt/iteration_20', 20)
    assert resolve_resume(cfg, 'auto') == os.path.join('.', 'exp', 'ckpt', 'iteration_20.safetensors')
    corrupt(newest)
    assert resolve_resume(cfg, 'auto') == os.path.join('.', 'exp', 'ckpt', 'iteration_10.safetensors')
    os.remove('exp/ckpt/iteration_10.manifest.json')  # an interrupted save: not a candidate
    assert resolve_resume(cfg, 'auto') is None


def test_explicit_path_is_verified_and_errors_name_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = EasyDict(exp_name='exp')
    good = write_ckpt('elsewhere/iteration_7', 7)
    assert resolve_resume(cfg, good) == good
    assert resolve_resume(cfg, 'elsewhere/iteration_7') == good  # the suffix may be left out
    assert resolve_resume(cfg, 'elsewhere') == os.path.join('elsewhere', 'iteration_7.safetensors')  # a directory
    corrupt(good)
    with pytest.raises(ResumeError) as exc:
        resolve_resume(cfg, good)
    assert 'elsewhere/iteration_7.safetensors' in str(exc.value) and 'sha256 mismatch' in str(exc.value)
    with pytest.raises(ResumeError, match="resume checkpoint 'nope.safetensors' not found"):
        resolve_resume(cfg, 'nope.safetensors')
    os.makedirs('empty')
    with pytest.raises(ResumeError, match="directory 'empty' holds no valid checkpoint"):
        resolve_resume(cfg, 'empty')


def test_packed_replay_buffer_round_trips_through_a_checkpoint(tmp_path):
    from ding.worker.replay_buffer import NaiveReplayBuffer

    buffer = NaiveReplayBuffer(dict(replay_buffer_size=50))
    samples = [
        {
            'obs': torch.randn(4),
            'action': torch.tensor(i % 2),
            'reward': torch.tensor(float(i)),
            'done': i % 7 == 0,
            'collect_iter': i,
        }
        for i in range(70)
    ]  # wraps around the ring
    buffer.push(samples)
    state = buffer.state_dict()
    packed = pack_buffer_state(state)
    assert set(packed['data']) == {'$packed_samples'}
    path = save_checkpoint(str(tmp_path / 'buf'), {'buffer': packed})
    assert len(read_manifest(path)['tensors']) == 3  # one stacked tensor per tensor column, not 150

    restored = NaiveReplayBuffer(dict(replay_buffer_size=50))
    restored.load_state_dict(unpack_buffer_state(load_checkpoint(path)['buffer']))
    assert restored.count() == buffer.count() == 50
    for a, b in zip(state['data'], restored.state_dict()['data']):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k], k
    assert [s['replay_unique_id'] for s in restored.sample(5, 0)]  # and it still serves samples


def test_a_restarted_learner_resumes_from_its_own_directory(tmp_path, monkeypatch):
    """What a parallel learner process does after a restart: ``resume_learner(learner, 'auto')``."""
    from ding.policy.dqn import DQNPolicy
    from ding.worker.learner import BaseLearner
    from ding.worker.resume import resume_learner

    monkeypatch.chdir(tmp_path)

    def learner(seed):
        cfg = DQNPolicy.default_config()
        cfg.model = EasyDict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[8], dueling=False)
        torch.manual_seed(seed)
        hook = dict(save_ckpt_after_iter=0, save_ckpt_after_run=False, log_show_after_iter=0)
        return BaseLearner(
            dict(hook=hook), DQNPolicy(cfg, enable_field=['learn']).learn_mode, exp_name='exp', instance_name='learner0'
        )

    first = learner(0)
    batch = {
        'obs': torch.randn(8, 4),
        'next_obs': torch.randn(8, 4),
        'action': torch.zeros(8, dtype=torch.long),
        'reward': torch.ones(8),
        'done': torch.zeros(8, dtype=torch.bool),
    }
    started = time.time()
    for _ in range(3):
        first.train(batch, envstep=40)
    path = first.save_checkpoint()
    assert path == os.path.join('.', 'exp', 'ckpt_learner0', 'iteration_3.safetensors')
    weights = first.policy.get_attribute('model').state_dict()
    first.close()

    restarted = learner(1)
    try:
        assert resume_learner(restarted, 'auto', not_before=time.time() + 60) is None  # older than this run
        assert resume_learner(restarted, 'auto', not_before=started) == path
        assert restarted.train_iter == 3 and restarted.collector_envstep == 40
        for k, v in restarted.policy.get_attribute('model').state_dict().items():
            assert torch.equal(v, weights[k]), k
    finally:
        restarted.close()


# ---- real serial runs -------------------------------------------------------------------------------
def small_dqn_config(exp_name: str):
    mod = importlib.import_module(DQN_MODULE)
    cfg = EasyDict(copy.deepcopy(dict(mod.main_config)))
    cfg.exp_name = exp_name
    cfg.env.update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1)
    cfg.policy.model.encoder_hidden_size_list = [32, 32]
    cfg.policy.eval.evaluator.eval_freq = 1000
    cfg.policy.learn.learner = dict(hook=dict(save_ckpt_after_iter=10, keep_n=0, log_show_after_iter=10))
    cfg.policy.other.replay_buffer.save_with_checkpoint = True
    return cfg, EasyDict(copy.deepcopy(dict(mod.create_config)))


@pytest.fixture
def serial_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    monkeypatch.setenv('DING_QUIET', '1')
    return tmp_path


def final_checkpoint(exp_dir):
    paths = [p for p in (exp_dir / 'ckpt').glob('iteration_*.safetensors')]
    return max(paths, key=lambda p: int(p.stem.split('_')[1]))


def test_serial_run_resumes_counters_buffer_and_rng_in_the_same_directory(serial_env):
    from ding.entry import serial_pipeline
    from ding.entry.pipeline_parts import build_serial_parts, finish_run

    cfg, create = small_dqn_config('resume_exp')
    serial_pipeline((cfg, create), seed=0, max_train_iter=30)
    exp = serial_env / 'resume_exp'
    last = final_checkpoint(exp)
    saved = load_checkpoint(str(last))
    extra = saved['extra_state']['serial_pipeline']
    assert extra['collector_envstep'] > 0 and extra['collector_envstep'] == saved['last_step']

    # Build the pipeline exactly as a resumed run does and look at what it restored.
    parts = build_serial_parts(
        copy.deepcopy(cfg), copy.deepcopy(create), 0, None, None, True, int(1e10), with_buffer=True, resume='auto'
    )
    try:
        assert parts.resume_path == os.path.join('.', 'resume_exp', 'ckpt', last.name)
        assert parts.cfg.exp_name == 'resume_exp'  # the directory is reused, not renewed
        assert parts.learner.train_iter == saved['last_iter']
        assert parts.collector.envstep == extra['collector_envstep']
        assert parts.buffer.count() == extra['replay_buffer']['valid_count'] > 0
        assert torch.equal(torch.get_rng_state(), saved['rng_state']['torch'])
        model = parts.policy.learn_mode.get_attribute('model')
        for k, v in model.state_dict().items():
            assert torch.equal(v, saved['model'][k]), k
        optimizer = parts.policy.learn_mode.get_attribute('optimizer')
        assert optimizer.state_dict()['state'][0]['step'] == saved['optimizer']['state'][0]['step']
    finally:
        finish_run(parts, False, 'test')

    serial_pipeline((cfg, create), seed=0, max_train_iter=60, resume='auto')
    assert sorted(p.name for p in serial_env.iterdir()) == ['resume_exp']  # no suffixed second directory
    resumed = load_checkpoint(str(final_checkpoint(exp)))
    assert resumed['last_iter'] >= 60
    assert resumed['extra_state']['serial_pipeline']['collector_envstep'] > extra['collector_envstep']
    log = (exp / 'log' / 'learner' / 'learner_logger.txt').read_text()
    assert (
        f'resumed from ./resume_exp/ckpt/{last.name}: iteration {saved["last_iter"]}, env step '
        f'{extra["collector_envstep"]}, replay buffer {extra["replay_buffer"]["valid_count"]} samples' in log
    )


def test_resume_never_starts_fresh_in_a_new_directory(serial_env):
    from ding.entry import serial_pipeline

    cfg, create = small_dqn_config('fresh_exp')
    serial_pipeline((cfg, create), seed=0, max_train_iter=10)
    first = {p.name for p in (serial_env / 'fresh_exp' / 'ckpt').iterdir()}
    serial_pipeline((cfg, create), seed=0, max_train_iter=10, resume='never')
    dirs = sorted(p.name for p in serial_env.iterdir())
    assert len(dirs) == 2 and dirs[0] == 'fresh_exp' and re.fullmatch(r'fresh_exp_\d{6}_\d{6}(_\d+)?', dirs[1])
    assert {p.name for p in (serial_env / 'fresh_exp' / 'ckpt').iterdir()} == first  # the old run is untouched
    fresh = load_checkpoint(str(final_checkpoint(serial_env / dirs[1])))
    assert fresh['last_iter'] <= 12  # counted from zero again


def test_on_policy_run_resumes(serial_env):
    from ding.entry import serial_pipeline_onpolicy

    mod = importlib.import_module('dizoo.classic_control.cartpole.config.cartpole_ppo_config')
    cfg = EasyDict(copy.deepcopy(dict(mod.main_config)))
    cfg.exp_name = 'ppo_exp'
    cfg.env.update(collector_env_num=2, evaluator_env_num=1, n_evaluator_episode=1)
    cfg.policy.collect.n_sample = 64
    cfg.policy.learn.batch_size = 64  # with one epoch: one optimizer step, so one iteration, per rollout
    cfg.policy.learn.epoch_per_collect = 1
    cfg.policy.learn.learner = dict(hook=dict(save_ckpt_after_iter=2, keep_n=0))
    create = EasyDict(copy.deepcopy(dict(mod.create_config)))
    serial_pipeline_onpolicy((cfg, create), seed=0, max_train_iter=3)
    first = load_checkpoint(str(final_checkpoint(serial_env / 'ppo_exp')))
    serial_pipeline_onpolicy((cfg, create), seed=0, max_train_iter=5, resume='auto')
    second = load_checkpoint(str(final_checkpoint(serial_env / 'ppo_exp')))
    assert first['last_iter'] == 3 and second['last_iter'] == 5
    assert second['last_step'] > first['last_step'] > 0
    log = (serial_env / 'ppo_exp' / 'log' / 'learner' / 'learner_logger.txt').read_text()
    assert f'resumed from ./ppo_exp/ckpt/iteration_3.safetensors: iteration 3, env step {first["last_step"]}' in log


# ---- the command line -------------------------------------------------------------------------------
def ding_cmd(*args):
    return [sys.executable, '-m', 'ding.entry.cli', *args]


def ding_env():
    return child_env(DING_PROGRESS='0', OMP_NUM_THREADS='1', DING_QUIET='1')


def test_cli_resume_from_a_corrupt_file_fails_before_any_work(tmp_path):
    bad = write_ckpt(str(tmp_path / 'saved' / 'iteration_5'), 5)
    corrupt(bad)
    result = subprocess.run(
        ding_cmd('-m', 'serial', '-c', DQN_CONFIG, '-s', '0', '--resume', bad),
        cwd=tmp_path,
        env=ding_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert bad in result.stderr and 'sha256 mismatch' in result.stderr
    assert 'Traceback' not in result.stderr
    assert not (tmp_path / 'cartpole_dqn_seed0').exists()  # nothing was started


def _killed_then_resumed_config(tmp_path) -> str:
    text = open(DQN_CONFIG).read()
    text = text.replace(
        'learning_rate=0.001,',
        'learning_rate=0.001, learner=dict(hook=dict(save_ckpt_after_iter=20, keep_n=0, log_show_after_iter=20)),',
    )
    assert 'save_ckpt_after_iter=20' in text
    path = tmp_path / 'cartpole_dqn_resume_config.py'
    path.write_text(text)
    return str(path)


@pytest.mark.slow
def test_run_killed_with_sigkill_resumes_and_reaches_the_stop_value(tmp_path):
    config = _killed_then_resumed_config(tmp_path)
    ckpt_dir = tmp_path / 'cartpole_dqn_seed0' / 'ckpt'
    proc = subprocess.Popen(
        ding_cmd('-m', 'serial', '-c', config, '-s', '0'),
        cwd=tmp_path,
        env=ding_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            done = [p for p in ckpt_dir.glob('iteration_*.manifest.json')] if ckpt_dir.is_dir() else []
            if len(done) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, 'the first run ended before it could be killed: ' + proc.stderr.read().decode()
        os.killpg(proc.pid, signal.SIGKILL)  # no after_run, no interrupt checkpoint: a real crash
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    before = {p.name: read_manifest(str(p)) for p in ckpt_dir.glob('*.safetensors')}
    newest_iter = max(m['last_iter'] for m in before.values())
    result = subprocess.run(
        ding_cmd('-m', 'serial', '-c', config, '-s', '0', '--resume', 'auto'),
        cwd=tmp_path,
        env=ding_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # the shipped DQN config solves CartPole (tests/entry/test_serial_training.py counts on this run for it)
    assert 'SOLVED' in result.stderr, result.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ['cartpole_dqn_seed0']
    assert (ckpt_dir / 'ckpt_best.safetensors').is_file()

    log = (tmp_path / 'cartpole_dqn_seed0' / 'log' / 'learner' / 'learner_logger.txt').read_text()
    m = re.search(r'resumed from \S+: iteration (\d+), env step (\d+)', log)
    assert m, log[-2000:]
    resumed_iter, resumed_step = int(m.group(1)), int(m.group(2))
    assert resumed_iter == newest_iter
    after = {p.name: read_manifest(str(p)) for p in ckpt_dir.glob('iteration_*.safetensors')}
    new = [man for man in after.values() if man['last_iter'] > resumed_iter]
    assert new, 'the resumed run wrote no checkpoint past the one it resumed from'
    assert min(man['last_step'] for man in new) > resumed_step  # env steps continued, not restarted
    # The learner's log tables after the resume count on from the resumed iteration.
    tables = [int(x) for x in re.findall(r'=== learner iteration (\d+):', log[m.end() :])]
    assert tables and min(tables) > resumed_iter


def _remote_cfg(store) -> EasyDict:
    return EasyDict(exp_name='exp', policy=dict(learn=dict(learner=dict(checkpoint=dict(ckpt_uri=str(store))))))


def test_resume_auto_takes_the_stored_checkpoint_when_it_is_newer_than_the_local_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    remote = RemoteCheckpoints(CheckpointSettings(ckpt_uri=str(tmp_path / 'store')))
    stored = write_ckpt(str(tmp_path / 'elsewhere' / 'iteration_7'), 7)
    remote.commit(remote.upload(stored, {'name': 'iteration_7', 'iteration': 7}), {})
    cfg = _remote_cfg(tmp_path / 'store')

    path = resolve_resume(cfg, 'auto')  # nothing local: downloaded into ./exp/ckpt
    assert os.path.samefile(path, tmp_path / 'exp' / 'ckpt' / 'iteration_7.safetensors')
    newer = write_ckpt(str(tmp_path / 'exp' / 'ckpt' / 'iteration_9'), 9)
    assert os.path.samefile(resolve_resume(cfg, 'auto'), newer)  # a newer local one (not yet stored) wins

    (tmp_path / 'store' / 'latest').write_text('{"checkpoint": "iteration_99"}')
    with pytest.raises(ResumeError, match="resume=auto: cannot use the checkpoints at .*store.*'iteration_99'"):
        resolve_resume(cfg, 'auto')
