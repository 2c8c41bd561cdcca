"""A learner's checkpoint section: a checkpoint every N env steps, stored under a ckpt_uri with the replay cursor,
and on_stall='pause' holding training while uploads fail."""

import json
import os
import threading

from ding.worker import BaseLearner
from ding.worker.learner.checkpoint_hooks import checkpoint_dir
from tests.helpers.moto_s3 import BUCKET, s3  # noqa: F401 - the fixture
from tests.helpers.service import learner_cfg, make_batch, make_dqn_policy
from tests.helpers.wait import wait_until


def _learner(tmp_path, **checkpoint) -> BaseLearner:
    cfg = dict(learner_cfg(), checkpoint=checkpoint)
    learner = BaseLearner(cfg, exp_name=str(tmp_path / 'exp'))
    learner.policy = make_dqn_policy().learn_mode
    learner.run_config = {'exp_name': 'exp', 'seed': 0, 'stop_value': float('inf')}
    return learner


def _batch(it: int) -> list:
    batch = make_batch(it)
    for n, sample in enumerate(batch):
        sample['replay_unique_id'] = f'buffer_{it * 8 + n}'
    return batch


def test_a_checkpoint_every_n_env_steps_stored_under_a_local_ckpt_uri(tmp_path):
    store = tmp_path / 'store'
    learner = _learner(tmp_path, ckpt_uri=str(store), every_env_steps=30, keep_n=2)
    for it in range(10):
        learner.train(_batch(it), envstep=(it + 1) * 10)  # 10 env steps per iteration
    learner.close()  # waits for the uploads
    # the first iteration sets the baseline (10 env steps); then one every 30: iterations 4, 7 and 10 done
    local = {n for n in os.listdir(checkpoint_dir(learner)) if n.endswith('.safetensors')}
    assert local == {'iteration_7.safetensors', 'iteration_10.safetensors'}  # keep_n locally too
    manifest = json.loads((store / 'MANIFEST.json').read_text())
    assert [e['key'] for e in manifest['checkpoints']] == ['iteration_7', 'iteration_10']
    newest = manifest['checkpoints'][-1]
    assert newest['last_step'] == 100
    assert newest['replay_cursor']['last_sampled_ids'][-1] == 'buffer_79'  # the batch of the 10th iteration
    assert manifest['config']['stop_value'] == 'inf'  # the snapshot stays strict JSON
    assert json.loads((store / 'latest').read_text())['checkpoint'] == 'iteration_10'


def test_on_stall_pause_holds_training_until_uploads_work_again(s3, tmp_path):  # noqa: F811
    uri = f's3://{BUCKET}/pause-{os.getpid()}-{tmp_path.name}'
    learner = _learner(
        tmp_path, ckpt_uri=uri, every_env_steps=1, on_stall='pause', upload_retries=0, retry_seconds=0.05
    )
    s3.stop()
    done = []
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            learner.train(_batch(len(done)), envstep=len(done) + 1)
            done.append(len(done))

    trainer = threading.Thread(target=train)
    trainer.start()
    try:
        wait_until(lambda: learner.checkpoint_uploader.stalled, 30, what='checkpoint_stalled')
        held = wait_until(lambda: _unchanged(done), 30, what='training to pause')
        assert trainer.is_alive() and learner.checkpoint_uploader.stalled
        s3.start()
        wait_until(lambda: len(done) > held + 2, 30, what='training to resume')
    finally:
        stop.set()
        s3.start()  # a paused trainer waits for the store to come back
        trainer.join(timeout=30)
    learner.close()
    assert not learner.checkpoint_uploader.stalled
    assert learner.checkpoint_uploader.state()['last_uploaded_iteration'] == len(done)


def _unchanged(done: list) -> int:
    """len(done) once it has not changed for half a second (0 while it still changes)."""
    before = len(done)
    threading.Event().wait(0.5)
    return before if len(done) == before and before else 0
