"""Storage faults while writing checkpoints: one clear error naming the path and the iteration not saved.

The fault is real, and one that root cannot write through either (chmod is no obstacle to root): the
checkpoint directory's path is taken by a regular file, so creating it fails with ``FileExistsError``."""

import os

import pytest

from ding.utils.atomic_file import StorageError
from ding.worker.learner import BaseLearner
from tests.helpers.learner_policies import learner_cfg, make_batch, make_policy


def test_unwritable_checkpoint_directory_raises_one_storage_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lrn = BaseLearner(learner_cfg(save_ckpt_after_iter=1), make_policy())
    try:
        os.makedirs('default_experiment', exist_ok=True)
        with open(os.path.join('default_experiment', 'ckpt'), 'w') as f:
            f.write('a file where the checkpoint directory should be')
        with pytest.raises(StorageError) as failure:
            lrn.train(make_batch(0))
    finally:
        lrn.close()
    message = str(failure.value)
    assert os.path.join('default_experiment', 'ckpt', 'iteration_1.safetensors') in message
    assert 'iteration 1 was NOT saved' in message and failure.value.errno is not None


def test_start_logs_a_storage_error_once_and_writes_no_exception_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lrn = BaseLearner(dict(learner_cfg(save_ckpt_after_iter=2), train_iterations=5), make_policy())
    try:
        lrn.get_data = lambda batch_size: make_batch(0, batch_size)
        os.makedirs('default_experiment', exist_ok=True)
        with open(os.path.join('default_experiment', 'ckpt'), 'w') as f:
            f.write('a file where the checkpoint directory should be')
        with pytest.raises(StorageError, match='iteration 2 was NOT saved'):
            lrn.start()
    finally:
        lrn.close()
    log = open(os.path.join('default_experiment', 'log', 'learner', 'learner_logger.txt')).read()
    assert log.count('NOT saved') == 1 and 'Traceback' not in log and 'exception checkpoint' not in log
