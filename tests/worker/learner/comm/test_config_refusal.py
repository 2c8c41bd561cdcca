"""A start task the comm learner cannot run with because of its config is refused with the config flag set, so that
the coordinator ends the run instead of handing the task to another learner."""

from ding.config.errors import CONFIG_REFUSAL
from tests.helpers.comm_learner import run_task, start_task


def test_a_bad_learner_config_is_refused_as_a_config_error(conn, comm):
    task = run_task(conn, start_task('task_c', 5, comm_batches=0))
    assert task.result.get(CONFIG_REFUSAL) is True
    assert "learner config 'comm_batches' must be a positive integer, got 0" in task.result['message']
    # the learner stays usable: a good task starts afterwards
    good = run_task(conn, start_task('task_d', 5))
    assert good.result.get(CONFIG_REFUSAL) is None and good.result['task_id'] == 'task_d'
