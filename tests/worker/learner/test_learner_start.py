"""``BaseLearner.start()`` (parallel mode) with a real ``AsyncDataLoader``: iteration counts, failures, signals."""

import functools
import itertools
import os
import signal
import subprocess
import sys
import time

import pytest

from ding.utils.checkpoint import load_checkpoint
from ding.worker.learner import BaseLearner, LearnerHook
from tests.helpers.learner_policies import learner_cfg, make_batch, make_policy, make_sample
from tests.helpers.processes import child_env

CKPT_DIR = 'default_experiment/ckpt'
LOG_FILE = 'default_experiment/log/learner/learner_logger.txt'


def failing_sample(i: int):
    if i >= 24:  # the 4th batch of 8
        raise ValueError(f'boom in data worker at sample {i}')
    return make_sample(i)


class BatchSource:
    """``get_data(batch_size)``: consecutive batches, as samples or as callables for worker processes."""

    def __init__(self, as_callables=False, sample_fn=make_sample):
        self._next = itertools.count()
        self._as_callables = as_callables
        self._sample_fn = sample_fn

    def __call__(self, batch_size):
        first = next(self._next) * batch_size
        if self._as_callables:
            return [functools.partial(self._sample_fn, first + j) for j in range(batch_size)]
        return [self._sample_fn(first + j) for j in range(batch_size)]


@pytest.fixture
def learners(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = []

    def make(cfg, policy=None, **kwargs):
        lrn = BaseLearner(cfg, policy or make_policy(), **kwargs)
        made.append(lrn)
        return lrn

    yield make
    for lrn in made:
        lrn.close()


def ckpt_names():
    return sorted(f for f in os.listdir(CKPT_DIR) if f.endswith('.safetensors')) if os.path.isdir(CKPT_DIR) else []


@pytest.mark.parametrize('num_workers', [0, 1])
def test_start_runs_exactly_train_iterations(learners, num_workers):
    cfg = dict(
        learner_cfg(save_ckpt_after_run=True, log_show_after_iter=5),
        train_iterations=7,
        dataloader=dict(num_workers=num_workers),
    )
    lrn = learners(cfg)
    lrn.get_data = BatchSource(as_callables=num_workers > 0)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    lrn.start()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert lrn.train_iter == 7
    assert lrn.policy.get_attribute('forward_calls') == 7
    assert lrn.learn_info['learner_done'] is True
    assert ckpt_names() == ['iteration_7.safetensors']
    # data_time (time waiting for the loader) is shown with the policy's variables.
    assert 'data_time' in open(LOG_FILE).read()


def test_start_without_get_data_says_what_to_do(learners):
    lrn = learners(dict(learner_cfg(), train_iterations=3))
    with pytest.raises(RuntimeError, match='get_data'):
        lrn.start()


def test_policy_exception_propagates_with_exception_ckpt(learners):
    lrn = learners(dict(learner_cfg(), train_iterations=10), policy=make_policy(fail_at_call=4))
    lrn.get_data = BatchSource()
    with pytest.raises(RuntimeError, match='policy failure at forward call 4'):
        lrn.start()
    assert ckpt_names() == ['exception_iteration_3.safetensors']
    assert load_checkpoint(f'{CKPT_DIR}/exception_iteration_3')['last_iter'] == 3
    log = open(LOG_FILE).read()
    assert 'learner failed at iteration 3' in log and 'Traceback' in log
    assert 'RuntimeError: policy failure at forward call 4' in log
    assert lrn.learn_info['learner_done'] is False


def test_data_worker_exception_propagates_with_exception_ckpt(learners):
    cfg = dict(learner_cfg(save_ckpt_after_run=True), train_iterations=10, dataloader=dict(num_workers=1))
    lrn = learners(cfg)
    lrn.get_data = BatchSource(as_callables=True, sample_fn=failing_sample)
    with pytest.raises(ValueError, match='boom in data worker at sample 24'):
        lrn.start()
    # Batches 0-2 trained; the 4th failed in the worker. after_run hooks did not run.
    assert lrn.train_iter == 3
    assert ckpt_names() == ['exception_iteration_3.safetensors']


class SignalAtHook(LearnerHook):
    """Sends ``ext_args['sig']`` to this process once ``ext_args['at']`` iterations are done."""

    def __call__(self, engine):
        if engine.last_iter.val + 1 == self.ext_args['at']:
            os.kill(os.getpid(), self.ext_args['sig'])


def test_sigint_stops_after_the_current_iteration(learners):
    lrn = learners(dict(learner_cfg(save_ckpt_after_run=True), train_iterations=1000))
    lrn.get_data = BatchSource()
    lrn.register_hook(SignalAtHook('sigint_at_3', 50, position='after_iter', ext_args={'at': 3, 'sig': signal.SIGINT}))
    before = signal.getsignal(signal.SIGINT)
    lrn.start()  # returns normally: no KeyboardInterrupt
    assert signal.getsignal(signal.SIGINT) is before
    assert lrn.train_iter == 3
    assert lrn.learn_info['learner_done'] is False
    # The interrupt checkpoint is the final one: after_run does not write iteration_3 again.
    assert ckpt_names() == ['interrupt_iteration_3.safetensors']
    assert 'SIGINT received: stopped after iteration 3' in open(LOG_FILE).read()


SIGTERM_SCRIPT = r"""
import itertools
import torch
torch.set_num_threads(1)
from ding.worker.learner import BaseLearner, LearnerHook
from tests.helpers.learner_policies import learner_cfg, make_batch, make_policy

class Ready(LearnerHook):
    def __call__(self, engine):
        if engine.last_iter.val == 4:
            open('ready', 'w').close()

counter = itertools.count()
learner = BaseLearner(dict(learner_cfg(save_ckpt_after_run=True), train_iterations=10**9), make_policy())
learner.get_data = lambda batch_size: make_batch(next(counter) % 50, batch_size)
learner.register_hook(Ready('ready', 50, position='after_iter'))
learner.start()
print('clean exit after', learner.train_iter, 'done', learner.learn_info['learner_done'], flush=True)
learner.close()
"""


def test_sigterm_to_a_subprocess_writes_interrupt_ckpt(tmp_path):
    script = tmp_path / 'run_learner.py'
    script.write_text(SIGTERM_SCRIPT)
    env = child_env(DING_QUIET='1', OMP_NUM_THREADS='1')
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / 'ready').exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, 'the learner subprocess never reached iteration 5'
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    words = out.split()
    assert words[:3] == ['clean', 'exit', 'after'] and words[4:] == ['done', 'False'], out
    n = int(words[3])
    assert n >= 5
    ckpts = sorted(os.listdir(tmp_path / CKPT_DIR))
    assert ckpts == [f'interrupt_iteration_{n}.manifest.json', f'interrupt_iteration_{n}.safetensors']
    assert load_checkpoint(tmp_path / CKPT_DIR / f'interrupt_iteration_{n}')['last_iter'] == n
    assert 'SIGTERM received' in (tmp_path / LOG_FILE).read_text()


def test_close_from_another_thread_stops_start(learners):
    """The comm learner runs start() in a thread and stops it with close()."""
    import threading

    lrn = learners(dict(learner_cfg(save_ckpt_after_run=True), train_iterations=10**9))
    lrn.get_data = BatchSource()
    errors = []

    def run():
        try:
            lrn.start()
        except BaseException as e:  # noqa: B902 - reported by the test below
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while lrn.train_iter < 3 and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.01)
        assert lrn.train_iter >= 3
    finally:
        lrn.close()
        thread.join(timeout=30)
    assert not thread.is_alive() and errors == []
    assert lrn.learn_info['learner_done'] is True
    assert ckpt_names() == [f'iteration_{lrn.train_iter}.safetensors']


class DoubleSigintHook(LearnerHook):
    def __call__(self, engine):
        if engine.last_iter.val == 1:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the handlers run here, in the main thread


def test_second_sigint_raises_keyboard_interrupt(learners):
    lrn = learners(dict(learner_cfg(save_ckpt_after_run=True), train_iterations=1000))
    lrn.get_data = BatchSource()
    lrn.register_hook(DoubleSigintHook('double_sigint', 50, position='after_iter'))
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        lrn.start()
    assert signal.getsignal(signal.SIGINT) is before
    assert ckpt_names() == ['exception_iteration_1.safetensors']


class StopAtHook(LearnerHook):
    def __call__(self, engine):
        if engine.last_iter.val + 1 == self.ext_args['at']:
            engine.stop()


def test_stop_leaves_the_loop_after_the_current_iteration(learners):
    lrn = learners(dict(learner_cfg(save_ckpt_after_run=True), train_iterations=1000))
    lrn.get_data = BatchSource()
    lrn.register_hook(StopAtHook('stop_at_4', 50, position='after_iter', ext_args={'at': 4}))
    lrn.start()
    assert lrn.train_iter == 4 and lrn.learn_info['learner_done'] is True
    assert ckpt_names() == ['iteration_4.safetensors']  # after_run hooks ran; the learner stays usable
    lrn.train(make_batch(4))
    assert lrn.train_iter == 5
