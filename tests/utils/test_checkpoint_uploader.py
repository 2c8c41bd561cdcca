"""The background checkpoint uploader against a real S3 server (moto) that goes away and comes back."""

import json
import os
import uuid

from ding.utils.checkpoint import save_checkpoint
from ding.utils.checkpoint_settings import CheckpointSettings
from ding.utils.checkpoint_uploader import CheckpointUploader
from ding.utils.remote_checkpoint import LATEST_NAME
from tests.helpers.moto_s3 import BUCKET, s3  # noqa: F401 - the fixture
from tests.helpers.wait import wait_until


def _write(directory, it: int) -> str:
    return save_checkpoint(os.path.join(directory, f'iteration_{it}'), {'w': list(range(it)), 'last_iter': it})


def test_uploads_stall_during_an_outage_and_recover_after_it(s3, tmp_path):  # noqa: F811
    prefix = uuid.uuid4().hex
    settings = CheckpointSettings(ckpt_uri=f's3://{BUCKET}/{prefix}', keep_n=2, upload_retries=1, retry_seconds=0.05)
    events = []
    uploader = CheckpointUploader(settings, str(tmp_path), run_info=lambda: {'exp_name': 'outage'})
    uploader.add_listener(lambda event, fields: events.append(event))
    try:
        uploader.submit(_write(tmp_path, 1), {'name': 'iteration_1', 'iteration': 1})
        assert uploader.flush(20)
        s3.stop()
        for it in (2, 3, 4):  # the training thread goes on writing checkpoints during the outage
            path = _write(tmp_path, it)
            uploader.submit(path, {'name': f'iteration_{it}', 'iteration': it})
            os.remove(path)  # a local prune cannot pull a staged file from under its upload
        wait_until(lambda: uploader.stalled, 30, what='checkpoint_stalled')
        state = uploader.state()
        assert state['stalled'] and state['pending'] == 2 and state['dropped'] == 1  # keep_n=2: iteration_2 dropped
        assert 'checkpoint_stalled' in events and state['last_error']
        s3.start()
        assert uploader.flush(30), (uploader.state(), events)
        assert not uploader.stalled and events.count('checkpoint_recovered') == 1
    finally:
        closed = uploader.close(timeout=5)
    assert closed
    latest = json.loads(s3.read(f'{prefix}/{LATEST_NAME}'))
    assert latest['checkpoint'] == 'iteration_4'
    assert not [k for k in s3.keys(prefix) if '/iteration_1/' in k or '/iteration_2/' in k]
    assert os.listdir(tmp_path / '.upload') == []  # nothing staged is left behind
