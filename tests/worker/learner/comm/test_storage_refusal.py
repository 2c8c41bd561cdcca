"""A checkpoint the disk refuses ends the comm learner's task with the storage flag, naming the file and the
iteration not saved, so that the coordinator ends the run instead of handing the task to another learner. The fault
is real and holds against root: a regular file where the checkpoint directory should be."""

from ding.utils.atomic_file import STORAGE_REFUSAL
from tests.helpers.comm_learner import BATCH, ok, run_task, start_task, write_sample_file


def test_a_refused_checkpoint_fails_the_next_task_with_the_storage_flag(conn, workdir):
    (workdir / 'exp').mkdir(exist_ok=True)
    (workdir / 'exp' / 'ckpt_learner0').write_text('a file where the checkpoint directory should be')
    good = write_sample_file(str(workdir / 'data'), BATCH)
    start = start_task('task_s', 10)
    start['task_info']['learner_cfg']['hook']['save_ckpt_after_iter'] = 2
    ok(conn, start)
    results = []
    for _ in range(5):  # trains until the checkpoint of iteration 2 is refused
        for name, extra in (('learner_get_data_task', {}), ('learner_learn_task', {'data': good})):
            task = run_task(conn, {'name': name, 'task_info': {'task_id': 'task_s'}, **extra})
            results.append(task.result)
            if task.result.get(STORAGE_REFUSAL):
                break
        if results[-1].get(STORAGE_REFUSAL):
            break
    refusal = results[-1]
    assert refusal.get(STORAGE_REFUSAL) is True, results
    assert 'exp/ckpt_learner0/iteration_2.safetensors' in refusal['message']
    assert 'the learner state of iteration 2 was NOT saved' in refusal['message']
