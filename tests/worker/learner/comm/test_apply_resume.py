"""Where a learner task moved from a dead learner resumes (``apply_resume``), on a real learner and real files:
the dead learner's policy file when it has no checkpoint of this run, and the iterations lost at WARNING."""

import logging
import os

import pytest
import torch

from ding.utils.file_transport import save_policy
from ding.worker.learner import BaseLearner
from ding.worker.learner.comm.learner_run import LearnerRun
from ding.worker.learner.comm.task_setup import apply_resume
from tests.helpers.learner_policies import learner_cfg, make_model, make_policy

LOGGER = 'test_apply_resume'


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learner = BaseLearner(learner_cfg(), make_policy())
    learner.resumed_from = None  # what the comm learner sets: no checkpoint of this run was found
    yield LearnerRun('learner_task_2', learner, 'policy_new', str(tmp_path / 'policy'), str(tmp_path / 'data'), 1.0)
    learner.close()


def _resume(last_iter: int) -> dict:
    return {'task_id': 'learner_task_2', 'resume': {'weights_from': 'policy_old', 'last_iter': last_iter}}


def test_resumes_from_the_dead_learners_policy_file_and_warns_of_the_iterations_lost(run, caplog):
    weights = {k: torch.full_like(v, 0.5) for k, v in make_model().state_dict().items()}
    save_policy(run.path_policy, 'policy_old', weights, 140)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        apply_resume(run, _resume(175), logging.getLogger(LOGGER))
    assert run.learner.train_iter == 140 and run.start_iter == 140
    assert run.policy_name == 'policy_new'  # a new task publishes under its own name
    torch.testing.assert_close(run.learner.policy.state_dict()['model'], weights)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    path = os.path.join(run.path_policy, 'policy_old.safetensors')
    assert warnings == [
        f'learner task learner_task_2: resumed at iteration 140 from {path}; 35 iterations of training lost '
        '(the previous learner had reached iteration 175)'
    ]


def test_a_corrupt_policy_file_means_fresh_weights_and_says_so(run, caplog):
    path = save_policy(run.path_policy, 'policy_old', make_model().state_dict(), 140)
    with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) - 8)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        apply_resume(run, _resume(175), logging.getLogger(LOGGER))
    assert run.learner.train_iter == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and 'training starts from fresh weights' in warnings[0] and path in warnings[0]
    assert '175 iterations of training lost' in warnings[1]


def test_after_a_checkpoint_the_published_weights_say_how_far_the_dead_learner_got(run, caplog):
    save_policy(run.path_policy, 'policy_old', make_model().state_dict(), 160)  # newer than the count below
    run.learner.last_iter.update(100)
    run.learner.resumed_from = 'iteration_100.safetensors'  # as if resume_learner had loaded it
    with caplog.at_level(logging.INFO, logger=LOGGER):
        apply_resume(run, _resume(120), logging.getLogger(LOGGER))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        'learner task learner_task_2: resumed at iteration 100 from iteration_100.safetensors; 60 iterations of '
        'training lost (the previous learner had reached iteration 160)'
    ]


def test_a_learner_that_died_before_reporting_past_its_checkpoint_still_warns(run, caplog):
    save_policy(run.path_policy, 'policy_old', make_model().state_dict(), 95)  # published before the checkpoint
    run.learner.last_iter.update(100)
    run.learner.resumed_from = 'iteration_100.safetensors'
    with caplog.at_level(logging.INFO, logger=LOGGER):
        apply_resume(run, _resume(90), logging.getLogger(LOGGER))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        'learner task learner_task_2: resumed at iteration 100 from iteration_100.safetensors; the previous learner '
        'last reported iteration 95, and any training it did after that report is lost'
    ]
