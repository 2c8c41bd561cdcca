"""Ctrl-C while the disk refuses the interrupt checkpoint: the serial run ends with one line naming the file and
the iteration not saved (exit 1), no traceback. The fault is real and holds against root: the checkpoint directory
is replaced by a regular file while the run trains."""

import os
import signal
import subprocess
import sys
import time

import pytest

from ding.entry.cli import checkpoint_summary
from tests.helpers.processes import ROOT, child_env
from tests.helpers.wait import wait_until

DQN_CONFIG = os.path.join(ROOT, 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py')


@pytest.mark.slow
def test_ctrl_c_with_an_unwritable_checkpoint_directory_is_one_line_naming_what_was_not_saved(tmp_path):
    config = tmp_path / 'cfg.py'
    # Never solved and never evaluated after the first time: the interrupt checkpoint is the one write that fails.
    config.write_text(
        f'exec(open({DQN_CONFIG!r}).read())\n'
        'main_config.env.stop_value = 100000\n'
        'main_config.policy.eval.evaluator.eval_freq = 10**9\n'
    )
    proc = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'serial', '-c', str(config), '-s', '0'],
        cwd=tmp_path,
        env=child_env(DING_PROGRESS='0', OMP_NUM_THREADS='1'),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ckpt = tmp_path / 'cartpole_dqn_seed0' / 'ckpt'
        wait_until(lambda: any(ckpt.glob('ckpt_best.safetensors')), 180, what='the first evaluation', proc=proc)
        time.sleep(1.0)
        ckpt.rename(ckpt.with_name('ckpt.moved'))
        ckpt.write_text('a file where the checkpoint directory should be')
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith('ding: error: interrupted; learner: cannot write checkpoint ./cartpole_dqn_seed0/ckpt/'), (
        err[-3000:]
    )
    assert 'interrupt_iteration_' in last and 'NOT saved' in last and 'Traceback' not in err
    # and what exists instead: the directory's place is taken, so no checkpoint of this run is there
    assert last.endswith('; ./cartpole_dqn_seed0/ckpt is not a directory: no checkpoint there'), last


def test_the_interrupt_summary_names_a_checkpoint_directory_that_is_not_one(tmp_path, monkeypatch):
    # A second Ctrl-C while the interrupt checkpoint is written ends in this summary: it must not fail on the cause.
    monkeypatch.chdir(tmp_path)
    os.makedirs('exp')
    with open(os.path.join('exp', 'ckpt'), 'w') as f:
        f.write('not a directory')
    assert checkpoint_summary('exp', time.time()) == './exp/ckpt is not a directory: no checkpoint there'
