"""Policy files: one self-verifying file published with one rename, on real files and a real process killed
while it publishes."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from ding.utils.checkpoint import CheckpointError, manifest_path
from ding.utils.file_transport import load_policy, save_policy
from tests.helpers.processes import child_env
from tests.helpers.wait import wait_until


def _weights(value: float) -> dict:
    return {'fc.weight': torch.full((4, 8), value), 'fc.bias': torch.full((4,), value)}


def test_policy_file_is_one_file_that_verifies_itself(tmp_path):
    path = save_policy(str(tmp_path), 'policy_learner0', _weights(1.5), 7)
    assert os.listdir(tmp_path) == ['policy_learner0.safetensors']
    state, policy_iter = load_policy(path)
    assert policy_iter == 7
    torch.testing.assert_close(state, _weights(1.5))

    data = bytearray(open(path, 'rb').read())
    data[-3] ^= 0x01  # one bit of a weight flipped
    with open(path, 'wb') as f:
        f.write(data)
    with pytest.raises(CheckpointError, match='sha256 mismatch') as flipped:
        load_policy(path)
    assert path in str(flipped.value)
    with open(path, 'wb') as f:
        f.write(bytes(data[:40]))  # torn inside the header
    with pytest.raises(CheckpointError, match='truncated or corrupt'):
        load_policy(path)
    with pytest.raises(CheckpointError, match='cannot read'):
        load_policy(str(tmp_path / 'missing.safetensors'))


def test_a_stale_manifest_beside_the_file_is_removed_and_ignored(tmp_path):
    path = save_policy(str(tmp_path), 'p', _weights(1.0), 1)
    with open(manifest_path(path), 'w') as f:
        f.write('{"format_version": 1}')  # what a crash of the older two-rename format could leave
    assert load_policy(path)[1] == 1
    save_policy(str(tmp_path), 'p', _weights(2.0), 2)
    assert not os.path.exists(manifest_path(path))


_PUBLISHER = """
import sys, torch
from ding.utils.file_transport import save_policy
directory, n = sys.argv[1], 0
while True:
    n += 1
    save_policy(directory, 'policy_learner0', {'w': torch.full((256, 256), float(n))}, n)
    if n == 1:
        print(n, flush=True)
"""


@pytest.mark.slow
def test_publisher_killed_at_random_moments_always_leaves_a_valid_newer_file(tmp_path):
    """SIGKILL 5 processes that publish as fast as they can, each at a random moment: each time the file there
    verifies and holds the weights of the version it names. (Started together, each in its own directory: one
    wait for their start-up, not five.)"""
    rng = random.Random(0)
    directories = [tmp_path / f'publisher{i}' for i in range(5)]
    procs = []
    try:
        for directory in directories:
            directory.mkdir()
            procs.append(
                subprocess.Popen(
                    [sys.executable, '-c', _PUBLISHER, str(directory)],
                    env=child_env(OMP_NUM_THREADS='1'),
                    stdout=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                )
            )
        for proc in procs:
            out = proc.stdout
            assert out is not None
            wait_until(out.readline, 60, what='the first publish', proc=proc)
            time.sleep(rng.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()
    for directory in directories:
        state, policy_iter = load_policy(str(directory / 'policy_learner0.safetensors'))
        assert policy_iter >= 1 and bool((state['w'] == float(policy_iter)).all())
        leftovers = [n for n in os.listdir(directory) if n != 'policy_learner0.safetensors']
        assert all(n.endswith('.tmp') for n in leftovers)  # only temp files of killed writes, never a second file
