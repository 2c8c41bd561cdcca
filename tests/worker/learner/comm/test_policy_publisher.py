"""The learner's policy publishing on real files: a policy directory that cannot be written is reported once,
naming the path and the iteration not published, and ends the learner task with the storage flag (the coordinator
then ends the run); writing again is reported when it works again."""

import logging
import os

import torch

from ding.utils.atomic_file import STORAGE_REFUSAL
from ding.utils.file_transport import load_policy
from ding.worker.learner import BaseLearner
from ding.worker.learner.comm.learner_run import LearnerRun
from ding.worker.learner.comm.policy_publisher import write_run_policy
from tests.helpers.learner_policies import learner_cfg, make_policy


def test_unwritable_policy_directory_is_logged_once_and_ends_the_task(tmp_path, caplog, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learner = BaseLearner(learner_cfg(), make_policy())
    try:
        blocker = tmp_path / 'policy'
        blocker.write_text('a file where the policy directory should be')  # a fault root cannot write through
        run = LearnerRun(
            'learner_task_1', learner, 'policy_learner0', str(blocker / 'sub'), str(tmp_path / 'data'), 1.0
        )
        logger = logging.getLogger('test_policy_publisher')
        with caplog.at_level(logging.INFO, logger='test_policy_publisher'):
            for it in range(5):
                write_run_policy(run, {'w': torch.full((2,), float(it))}, it, logger)
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, caplog.text
        assert os.path.join(str(blocker), 'sub', 'policy_learner0.safetensors') in errors[0].getMessage()
        assert 'iteration 0 were NOT published' in errors[0].getMessage()
        assert run.published.is_set()
        assert run.refusal() == {STORAGE_REFUSAL: True} and 'iteration 0 were NOT published' in run.storage_error
        assert 'iteration 0 were NOT published' in run.ended_message('learner_learn_task')

        run.path_policy = str(tmp_path / 'policy_ok')
        with caplog.at_level(logging.INFO, logger='test_policy_publisher'):
            write_run_policy(run, {'w': torch.full((2,), 9.0)}, 9, logger)
        assert 'written again (iteration 9)' in caplog.text and run.publish_error is None
        assert load_policy(os.path.join(run.path_policy, 'policy_learner0.safetensors'))[1] == 9
    finally:
        learner.close()
