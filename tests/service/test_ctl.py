"""``ding ctl`` against a real run service on 127.0.0.1 (the CLI's own entry point, in-process)."""

import json
import subprocess
import sys
import time

import pytest

from ding.entry.cli import main as ding_main
from ding.entry.ctl import parse_assignment
from ding.service.hooks import write_run_file
from ding.service.http import serve
from ding.service.run_control import RunControl
from tests.helpers.service import TrainLoop

TOKEN = 'ctl-test-token'


@pytest.fixture
def run(tmp_path):
    """A served RunControl with a loop thread and tunable lr / batch size, and a run.json in tmp_path/exp."""
    control = RunControl()
    values = {'learning_rate': 0.01, 'batch_size': 32}
    for key in values:
        control.register_tunable(key, lambda k=key: values[k], lambda v, k=key: values.__setitem__(k, v))

    def step(i):
        if not control.gate(i):
            return False
        time.sleep(0.005)
        control.note_progress(i + 1)
        return True

    loop = TrainLoop(step).start()
    server = serve(control, token=TOKEN, info={'run_id': 'r-1', 'exp_name': 'exp', 'pid': 1})
    exp_dir = tmp_path / 'exp'
    write_run_file(str(exp_dir / 'run.json'), {'address': server.address, 'token': TOKEN, 'run_id': 'r-1'})
    try:
        yield server, control, values, str(exp_dir)
    finally:
        control.request_terminate()
        loop.stop()
        server.close()


def test_status_pause_tune_resume_terminate(run, capsys):
    server, control, values, exp_dir = run
    assert ding_main(['ctl', 'status', '--address', server.address]) == 0  # status needs no token
    out = capsys.readouterr().out
    assert 'state: running' in out and 'learning_rate = 0.01  (tune range (0, 1])' in out

    assert ding_main(['ctl', '--exp-dir', exp_dir, 'pause']) == 0  # options before the command work too
    assert 'state: paused' in capsys.readouterr().out and control.state == 'paused'

    assert (
        ding_main(
            ['ctl', 'tune', '--exp-dir', exp_dir, '--set', 'learning_rate=3e-4', '--set', 'policy.learn.batch_size=64']
        )
        == 0
    )
    out = capsys.readouterr().out
    assert 'learning_rate: 0.01 -> 0.0003' in out and 'batch_size: 32 -> 64' in out
    assert values == {'learning_rate': 0.0003, 'batch_size': 64}

    assert ding_main(['ctl', 'tune', '--exp-dir', exp_dir, '--set', 'batch_size=0']) == 1
    err = capsys.readouterr().err
    assert 'HTTP 422' in err and 'batch_size' in err and '[1, 65536]' in err
    assert values['batch_size'] == 64

    assert ding_main(['ctl', 'resume', '--exp-dir', exp_dir]) == 0
    assert 'state: running' in capsys.readouterr().out

    assert ding_main(['ctl', 'status', '--exp-dir', exp_dir, '--json']) == 0
    data = json.loads(capsys.readouterr().out)
    assert data['hyperparameters'] == {'batch_size': 64, 'learning_rate': 0.0003} and data['run_id'] == 'r-1'

    assert ding_main(['ctl', 'terminate', '--exp-dir', exp_dir]) == 0
    assert 'state: terminated' in capsys.readouterr().out


def test_wrong_token_and_usage_errors(run, capsys, tmp_path):
    server, control, values, exp_dir = run
    assert ding_main(['ctl', 'pause', '--address', server.address, '--token', 'wrong-token']) == 1
    assert 'HTTP 403' in capsys.readouterr().err and control.state == 'running'
    assert ding_main(['ctl', 'pause', '--address', server.address]) == 1
    assert 'HTTP 401' in capsys.readouterr().err
    assert ding_main(['ctl', 'status']) == 2
    assert '--address HOST:PORT or --exp-dir DIR' in capsys.readouterr().err
    assert ding_main(['ctl', 'status', '--exp-dir', str(tmp_path / 'none')]) == 2
    assert 'run.json not found' in capsys.readouterr().err
    assert ding_main(['ctl', 'tune', '--address', server.address, '--token', TOKEN, '--set', 'oops']) == 2
    assert 'KEY=VALUE' in capsys.readouterr().err
    assert ding_main(['ctl', 'status', '--address', '127.0.0.1:9']) == 1
    assert 'cannot reach the run' in capsys.readouterr().err
    assert ding_main(['ctl']) == 2


def test_parse_assignment():
    assert parse_assignment('learning_rate=1e-4') == ('learning_rate', 1e-4)
    assert parse_assignment(' update_per_collect = 4 ') == ('update_per_collect', 4)
    assert parse_assignment('eps.type=linear') == ('eps.type', 'linear')


CTL_PROGRAM = """
import json, sys, time
start = time.perf_counter()
from ding.entry.cli import main
rc = main(['ctl', 'status', '--json', '--address', sys.argv[1]])
print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules, 'seconds': time.perf_counter() - start}))
"""


def test_ctl_does_not_import_torch(run):
    """``ding ctl`` must start fast: nothing on its path imports torch (seconds per call otherwise)."""
    server = run[0]
    done = subprocess.run(
        [sys.executable, '-c', CTL_PROGRAM, server.address], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result['rc'] == 0, done.stdout
    assert result['torch'] is False, 'ding ctl imported torch'
