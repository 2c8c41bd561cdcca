"""Resume in parallel mode: a SIGKILLed learner process is restarted by the pipeline, continues from its own
newest valid checkpoint and warns of the iterations the kill cost; a SIGKILLed pipeline rerun with ``--resume auto``
continues the learner iteration and the coordinator's env steps (both kills in one run: a run's start is the slow
part); ``--resume PATH`` is checked before anything starts."""

import glob
import json
import os
import re
import signal
import time

import pytest

from ding.utils.checkpoint import CheckpointError
from ding.utils.file_transport import load_policy
from ding.worker.resume import ResumeError
from tests.helpers.parallel_run import EXP, ParallelRun, Service, checkpoint_iterations, write_config


def test_bad_resume_path_stops_the_run_before_anything_starts(tmp_path, monkeypatch):
    from ding.entry.parallel_entry import parallel_pipeline

    monkeypatch.chdir(tmp_path)
    cfg = write_config(str(tmp_path / 'cfg.py'))
    missing = str(tmp_path / 'old' / 'iteration_400.safetensors')
    with pytest.raises(ResumeError, match='iteration_400'):
        parallel_pipeline(cfg, 0, resume=missing)
    assert not os.path.exists(tmp_path / EXP)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _read(path: str) -> str:
    with open(path, encoding='utf-8', errors='replace') as f:
        return f.read()


def _kill_the_learner_between_two_checkpoints(run: ParallelRun, coordinator: Service) -> None:
    """SIGKILL learner0 40-80 iterations past its checkpoint at 200 or later: the pipeline restarts it, it resumes
    from its newest valid checkpoint (never fresh weights), warns of the iterations lost and trains on."""
    ckpt_dir = os.path.join(run.exp_dir, 'ckpt_learner0')
    first = run.wait_for(lambda: run.run_info('run_learner0.json'), 60, "the learner's run file")
    learner = Service(first)

    def published_iteration() -> int:
        """The newest iteration of the learner's published policy files (0 before the first)."""
        newest = 0
        for path in glob.glob(os.path.join(run.exp_dir, 'policy', '*.safetensors')):
            try:
                newest = max(newest, load_policy(path)[1])
            except (CheckpointError, OSError):  # being replaced right now
                pass
        return newest

    def mid_interval():
        # past the second checkpoint, the next one not due yet, and the publisher (every 0.2 s) has written newer
        # weights than the checkpoint: the restarted learner can tell how many iterations were lost
        iteration = learner.status()['iteration']
        last = max(checkpoint_iterations(ckpt_dir) or [0])
        ready = iteration > 200 and 40 <= iteration % 100 < 80 and last >= 200 and published_iteration() > last
        return iteration if ready else None

    run.wait_for(mid_interval, 120, 'training between two checkpoints, past the second')
    last_ckpt = max(checkpoint_iterations(ckpt_dir))
    os.kill(first['pid'], signal.SIGKILL)

    def restarted():
        info = run.run_info('run_learner0.json')
        return info if info and info['pid'] != first['pid'] else None

    second = run.wait_for(restarted, 60, 'the learner to be restarted')
    log = os.path.join(run.exp_dir, 'log', 'learner0', 'learner0_logger.txt')

    def resumed_at():
        m = re.search(r'learner0 resumed from \S+iteration_(\d+)\.safetensors \(iteration (\d+)', _read(log))
        return int(m.group(2)) if m else None

    start = run.wait_for(resumed_at, 30, 'the restarted learner to resume from its checkpoint')
    assert start >= last_ckpt >= 200
    comm_log = os.path.join(run.exp_dir, 'log', 'comm_learner0', 'comm_learner0_logger.txt')

    def warning():
        return re.search(
            r'WARNING .*resumed at iteration (\d+) from (\S+); (\d+) iterations of training lost '
            r'\(the previous learner had reached iteration (\d+)\)',
            _read(comm_log),
        )

    try:
        found = run.wait_for(warning, 120, 'the restarted learner to report the iterations lost')
    except AssertionError as failure:
        raise AssertionError(f'{failure}\ncomm learner log:\n{_read(comm_log)[-3000:]}') from None
    resumed, source, lost, reached = int(found[1]), found[2], int(found[3]), int(found[4])
    assert resumed >= last_ckpt and source.endswith(f'iteration_{resumed}.safetensors'), found[0]
    assert reached > resumed and lost == reached - resumed
    assert 'fresh weights' not in _read(comm_log)
    learner = Service(second)
    run.wait_for(lambda: learner.status()['iteration'] > start + 20, 60, 'training to go on after the restart')
    # The coordinator counts learn infos, which reach it a learn task (up to comm_batches iterations) later.
    run.wait_for(lambda: coordinator.status()['iteration'] > start, 60, 'the coordinator to count them too')
    coordinator_log = os.path.join(run.exp_dir, 'log', 'coordinator', 'coordinator_logger.txt')
    assert 'learner0 reported dead' in _read(coordinator_log)


@pytest.mark.slow
def test_killed_learner_resumes_then_killed_pipeline_resumed_with_auto_continues_its_counters(tmp_path):
    """One run for both kills (each start of a parallel CartPole run costs tens of seconds): first learner0 alone
    is SIGKILLed and restarted by the pipeline, then the whole pipeline, which ``--resume auto`` continues."""
    cfg = write_config(
        str(tmp_path / 'cfg.py'),
        service=dict(enable=True),
        stop_value=100000,
        learner_hook=dict(save_ckpt_after_iter=100),
    )
    ckpt_dir = os.path.join(str(tmp_path), EXP, 'ckpt_learner0')
    state_path = os.path.join(str(tmp_path), EXP, 'coordinator_state.json')

    def saved_state():
        try:
            with open(state_path, encoding='utf-8') as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    first = ParallelRun(str(tmp_path), cfg)
    try:
        coordinator = Service(first.wait_for(lambda: first.run_info(), 60, 'the coordinator run.json'))
        _kill_the_learner_between_two_checkpoints(first, coordinator)
        learner_pid = first.run_info('run_learner0.json')['pid']
        first.wait_for(
            lambda: (saved_state() or {}).get('train_iter', 0) >= 100,
            30,
            'the coordinator state file to pass the checkpoint',
        )
        os.killpg(first.proc.pid, signal.SIGKILL)  # the whole pipeline process group: no clean shutdown
        first.proc.wait(10)
    finally:
        first.stop()
    killed = saved_state()
    assert killed['env_step'] > 0 and killed['train_iter'] >= 100
    deadline = time.time() + 20  # the orphaned workers notice the pipeline is gone and free their ports
    while _alive(learner_pid) and time.time() < deadline:
        time.sleep(0.2)
    ckpt_iter = max(checkpoint_iterations(ckpt_dir))  # the orphaned learner may have written a last one

    second = ParallelRun(str(tmp_path), cfg, '--resume', 'auto')
    try:
        info = second.wait_for(
            lambda: (second.run_info() or {}).get('pid') == second.proc.pid and second.run_info(),
            60,
            "the resumed coordinator's run.json",
        )
        coordinator = Service(info)

        def env_steps() -> float:
            text = coordinator.get('/metrics').text
            return max(
                [float(line.split()[-1]) for line in text.splitlines() if line.startswith('collector_env_steps_total')]
                or [0.0]
            )

        # The service answers before the counters are restored: wait for the first non-zero reading. A counter
        # that restarted from 0 would first report a few steps, far below the killed run's count.
        first_reading = second.wait_for(env_steps, 60, 'the coordinator to report env steps')
        assert first_reading >= killed['env_step'], first_reading  # the counter did not start from 0
        learner = Service(second.wait_for(lambda: second.run_info('run_learner0.json'), 60, "the learner's run file"))
        second.wait_for(lambda: learner.status()['iteration'] > ckpt_iter, 60, 'the learner to train on')
        second.wait_for(
            lambda: (saved_state() or {}).get('env_step', 0) > killed['env_step'],
            30,
            'the env steps to grow past the killed run',
        )
        assert coordinator.post('/run/terminate', {'wait': 60}).status_code == 200
        assert second.proc.wait(60) == 0
    finally:
        second.stop()
    log = open(
        os.path.join(str(tmp_path), EXP, 'log', 'coordinator', 'coordinator_logger.txt'),
        encoding='utf-8',
        errors='replace',
    ).read()
    assert f'env_step {killed["env_step"]}' in log, log[-2000:]
    learner_log = open(
        os.path.join(str(tmp_path), EXP, 'log', 'learner0', 'learner0_logger.txt'), encoding='utf-8', errors='replace'
    ).read()
    # the last resume in the log: the first one is the restart after the learner alone was killed
    resumes = re.findall(r'learner0 resumed from \S+iteration_(\d+)\.safetensors', learner_log)
    assert resumes and int(resumes[-1]) == ckpt_iter, learner_log[-2000:]
    assert saved_state()['train_iter'] > ckpt_iter
