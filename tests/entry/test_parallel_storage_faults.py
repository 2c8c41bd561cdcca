"""A parallel run whose learner cannot write a checkpoint or its policy file, or whose collector cannot write a
sample file, ends with one line naming the path and what was not saved (exit 1), like the serial pipeline, instead
of the coordinator retrying the task.

The faults are real and hold against root too (chmod does not): a regular file where the directory should be.

Each run also shows that the main process of ``ding -m parallel`` (the coordinator) never maps libtorch while the run
is on, from its start to its end on the fault (about 220 MB resident saved; tests/worker/coordinator/
test_coordinator_torch_free.py checks the pieces it runs). The run service imports torch: these runs leave it off."""

import os

import pytest

from tests.helpers.parallel_run import EXP, ParallelRun, write_config
from tests.helpers.processes import worker_pids


class _MemoryMap:
    """Readings of the pipeline's memory map (/proc/PID/maps) while its workers run: did it map libtorch?"""

    def __init__(self, pid: int, marker: str) -> None:
        self.pid, self.marker = pid, marker  # marker: in the worker processes' command lines
        self.readings, self.maps_torch, self.workers_seen = 0, False, False

    def read(self) -> bool:
        """Reads the map once; False, so that it can precede a condition in a poll."""
        try:
            with open(f'/proc/{self.pid}/maps') as f:
                text = f.read()
        except OSError:  # the process has ended
            return False
        # Kept only if the run is still on after it (workers alive, or none started yet): once the workers are gone,
        # the error line verifies the checkpoint it names, which loads torch.
        if worker_pids(self.marker):
            self.workers_seen = True
        elif self.workers_seen:
            return False
        self.readings += 1
        self.maps_torch = self.maps_torch or 'libtorch' in text
        return False


def _run_until_it_ends(tmp_path, block_before=None, block_during=None, collectors: int = 1) -> str:
    """A parallel CartPole run (never solved, a checkpoint every 50 iterations, ``collectors`` collector processes)
    with ``block_before(exp_dir)`` done before it starts and ``block_during(exp_dir)`` once it wrote a checkpoint;
    asserts it ends with exit 1, without a retry, leaves no worker and its main process never mapped libtorch while
    the run was on; returns its output."""
    cfg = write_config(
        str(tmp_path / 'cfg.py'),
        stop_value=100000,
        learner_hook=dict(save_ckpt_after_iter=50),
        collector=dict(collector_num=collectors),
    )
    exp_dir = tmp_path / EXP
    exp_dir.mkdir()
    if block_before is not None:
        block_before(exp_dir)
    run = ParallelRun(str(tmp_path), cfg)
    main_process = _MemoryMap(run.proc.pid, str(tmp_path))
    try:
        if block_during is not None:
            ckpt = exp_dir / 'ckpt_learner0'
            checkpoint = lambda: main_process.read() or any(ckpt.glob('iteration_*.safetensors'))  # noqa: E731
            run.wait_for(checkpoint, 120, 'a learner checkpoint')
            block_during(exp_dir)
        run.wait_for(lambda: main_process.read() or run.proc.poll() is not None, 180, 'the run to end')
    finally:
        run.stop()
    output = run.output()
    assert run.proc.returncode == 1, output[-3000:]
    assert main_process.readings > 10 and not main_process.maps_torch, 'the main process loaded libtorch'
    assert worker_pids(str(tmp_path)) == []
    assert 'reassigning' not in output, output[-3000:]  # not retried
    return output


@pytest.mark.slow
def test_a_checkpoint_the_disk_refuses_ends_the_parallel_run_naming_it(tmp_path):
    output = _run_until_it_ends(tmp_path, block_before=lambda exp: (exp / 'ckpt_learner0').write_text('not a dir'))
    last = output.strip().splitlines()[-1]
    assert last.startswith('ding: error: the run ended: learner task'), output[-3000:]
    assert os.path.join('ckpt_learner0', 'iteration_50.safetensors') in last
    assert 'iteration 50 was NOT saved' in last
    assert last.endswith(f'; ./{EXP}/ckpt_learner0 is not a directory: no checkpoint there'), last


def _block_policy_directory(exp_dir) -> None:
    (exp_dir / 'policy').rename(exp_dir / 'policy.moved')
    (exp_dir / 'policy').write_text('a file where the policy directory should be')


@pytest.mark.slow
def test_a_policy_file_the_disk_refuses_ends_the_parallel_run_naming_it(tmp_path):
    output = _run_until_it_ends(tmp_path, block_during=_block_policy_directory)
    last = output.strip().splitlines()[-1]
    assert last.startswith('ding: error: the run ended: learner task'), output[-3000:]
    assert 'cannot write the policy file' in last and os.path.join(EXP, 'policy', 'policy_learner') in last
    assert 'were NOT published' in last
    # the checkpoints written before the fault are named: they are what --resume auto continues from
    assert f'checkpoint written by this run: ./{EXP}/ckpt_learner0/' in last, last


def _block_data_directory(exp_dir) -> None:
    (exp_dir / 'data').rename(exp_dir / 'data.moved')
    (exp_dir / 'data').write_text('a file where the sample directory should be')


@pytest.mark.slow
def test_a_sample_file_the_disk_refuses_ends_the_parallel_run_naming_it(tmp_path):
    # two collectors: a sample file refused by one is not a task to hand to the other
    output = _run_until_it_ends(tmp_path, block_during=_block_data_directory, collectors=2)
    last = output.strip().splitlines()[-1]
    assert last.startswith('ding: error: the run ended: collector task'), output[-3000:]
    assert f'cannot write a sample file in {tmp_path / EXP / "data"} (' in last and 'samples were NOT saved' in last
