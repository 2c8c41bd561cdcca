"""A learner task given up after its learner died (``task_retries`` spent) hands its progress to the next
learner task: that one resumes (checkpoint of this run, else the given-up task's policy file), never from 0."""

from tests.helpers.wait import wait_until


def test_next_learner_task_resumes_the_given_up_one(toy_cluster):
    cluster = toy_cluster(
        stop_value=25,
        coordinator=dict(task_retries=0),
        learner_kwargs=({'iter_sleep': 0.02}, {'iter_sleep': 0.02}),
    )
    cluster.coordinator.start()
    assert wait_until(lambda: any(learner.iter >= 5 for learner in cluster.learners))
    victim = next(learner for learner in cluster.learners if learner.task_info is not None)
    survivor = next(learner for learner in cluster.learners if learner is not victim)
    given_up = victim.task_info
    cluster.coordinator.notify_worker_dead('learner', 'learner0' if victim is cluster.learners[0] else 'learner1')
    victim.close()
    assert wait_until(lambda: survivor.started_tasks, timeout=30)
    following = survivor.started_tasks[0]
    assert following['task_id'] != given_up['task_id']  # a new task, not a retry
    resume = following['resume']
    assert resume['weights_from'] == given_up['policy_name'] and resume['checkpoint'] == 'auto'
    assert resume['last_iter'] >= 0 and 'policy_name' not in resume  # it publishes under its own name
