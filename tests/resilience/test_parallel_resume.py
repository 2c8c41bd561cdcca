"""Resume in parallel mode: a SIGKILLed learner process is restarted by the pipeline and continues from its
own newest checkpoint; ``--resume PATH`` is checked before anything starts."""
import os
import re
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'service'))
from parallel_run_helpers import EXP, ParallelRun, Service, checkpoint_iterations, write_config  # noqa: E402

from ding.entry.resume import ResumeError  # noqa: E402


def test_bad_resume_path_stops_the_run_before_anything_starts(tmp_path, monkeypatch):
    from ding.entry.parallel_entry import parallel_pipeline
    monkeypatch.chdir(tmp_path)
    cfg = write_config(str(tmp_path / 'cfg.py'))
    missing = str(tmp_path / 'old' / 'iteration_400.safetensors')
    with pytest.raises(ResumeError, match='iteration_400'):
        parallel_pipeline(cfg, 0, resume=missing)
    assert not os.path.exists(tmp_path / EXP)


@pytest.mark.slow
def test_killed_learner_resumes_from_its_checkpoint(tmp_path):
    cfg = write_config(str(tmp_path / 'cfg.py'), service=dict(enable=True), stop_value=100000,
                       learner_hook=dict(save_ckpt_after_iter=100))
    run = ParallelRun(str(tmp_path), cfg)
    ckpt_dir = os.path.join(run.exp_dir, 'ckpt_learner0')
    try:
        coordinator = Service(run.wait_for(lambda: run.run_info(), 60, 'the coordinator run.json'))
        first = run.wait_for(lambda: run.run_info('run_learner0.json'), 60, "the learner's run file")
        run.wait_for(lambda: any(i >= 200 for i in checkpoint_iterations(ckpt_dir)), 60, 'two learner checkpoints')
        os.kill(first['pid'], signal.SIGKILL)

        def restarted():
            info = run.run_info('run_learner0.json')
            return info if info and info['pid'] != first['pid'] else None

        second = run.wait_for(restarted, 60, 'the learner to be restarted')
        log = os.path.join(run.exp_dir, 'log', 'learner0', 'learner0_logger.txt')

        def resumed_at():
            with open(log, encoding='utf-8', errors='replace') as f:
                m = re.search(r'learner0 resumed from \S+iteration_(\d+)\.safetensors \(iteration (\d+)', f.read())
            return int(m.group(2)) if m else None

        start = run.wait_for(resumed_at, 30, 'the restarted learner to resume from its checkpoint')
        assert start >= 200
        learner = Service(second)
        run.wait_for(lambda: learner.status()['iteration'] > start + 20, 60, 'training to go on after the restart')
        assert coordinator.status()['iteration'] > start
        assert coordinator.post('/run/terminate', {'wait': 60}).status_code == 200
        assert run.proc.wait(60) == 0
    finally:
        run.stop()
    assert 'learner0 reported dead' in open(os.path.join(run.exp_dir, 'log', 'coordinator', 'coordinator_logger.txt'),
                                            encoding='utf-8').read()
