"""A learner SIGKILLed in a real ``ding -m parallel`` run while it trains and publishes: the restarted learner
resumes from its newest valid checkpoint (never fresh weights) and says at WARNING how many iterations the
kill cost, measured against the weights the dead learner had published."""

import os
import re
import signal

import pytest

from tests.helpers.parallel_run import ParallelRun, Service, checkpoint_iterations, write_config


@pytest.mark.slow
def test_killed_learner_resumes_a_valid_version_and_warns_of_the_iterations_lost(tmp_path):
    cfg = write_config(
        str(tmp_path / 'cfg.py'),
        service=dict(enable=True),
        stop_value=100000,
        learner_hook=dict(save_ckpt_after_iter=100),
    )
    run = ParallelRun(str(tmp_path), cfg)
    ckpt_dir = os.path.join(run.exp_dir, 'ckpt_learner0')
    comm_log = os.path.join(run.exp_dir, 'log', 'comm_learner0', 'comm_learner0_logger.txt')
    try:
        first = run.wait_for(lambda: run.run_info('run_learner0.json'), 60, "the learner's run file")
        run.wait_for(lambda: checkpoint_iterations(ckpt_dir), 90, 'a learner checkpoint')
        learner = Service(first)

        def mid_interval():
            # 40-80 iterations past a checkpoint (one every 100): the publisher (every 0.2 s) has written newer
            # weights, and the next checkpoint is not due yet
            iteration = learner.status()['iteration']
            return iteration if iteration > 100 and 40 <= iteration % 100 < 80 else None

        run.wait_for(mid_interval, 90, 'training between two checkpoints')
        last_ckpt = max(checkpoint_iterations(ckpt_dir))
        os.kill(first['pid'], signal.SIGKILL)

        def warning():
            with open(comm_log, encoding='utf-8', errors='replace') as f:
                return re.search(
                    r'WARNING .*resumed at iteration (\d+) from (\S+); (\d+) iterations of training lost '
                    r'\(the previous learner had reached iteration (\d+)\)',
                    f.read(),
                )

        try:
            found = run.wait_for(warning, 120, 'the restarted learner to report the iterations lost')
        except AssertionError as failure:
            with open(comm_log, encoding='utf-8', errors='replace') as f:
                raise AssertionError(f'{failure}\ncomm learner log:\n{f.read()[-3000:]}') from None
        resumed, source, lost, reached = int(found[1]), found[2], int(found[3]), int(found[4])
        assert resumed >= last_ckpt and source.endswith(f'iteration_{resumed}.safetensors'), found[0]
        assert reached > resumed and lost == reached - resumed
        with open(comm_log, encoding='utf-8', errors='replace') as f:
            assert 'fresh weights' not in f.read()
    finally:
        run.stop()
