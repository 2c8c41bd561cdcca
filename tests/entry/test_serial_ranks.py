"""``ding --nproc 2``: the serial, on-policy and async pipelines on two rank processes (real processes, gloo on
127.0.0.1), the launcher's Ctrl-C and restart after a SIGKILL, and the agreements the ranks make each loop."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ding.config.parallel import find_free_port
from ding.entry.rank_group import RankGroup, stop_reason
from ding.entry.rank_launcher import RankProgressFile, read_rank_progress
from tests.helpers.processes import ROOT, child_env
from tests.helpers.wait import wait_until

CARTPOLE = os.path.join(ROOT, 'dizoo/classic_control/cartpole/config')
CHECKPOINT_EVERY = 20  # iterations between the periodic checkpoints of the killed run


def write_config(tmp_path, name, **replace):
    """A copy of the CartPole config ``name`` with some of its text replaced."""
    text = open(os.path.join(CARTPOLE, name)).read()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def start_ding(args, cwd):
    """``ding ARGS`` in ``cwd``, its stderr (the launcher's and rank 0's lines) in ``cwd/stderr.txt``."""
    err = open(cwd / 'stderr.txt', 'w')
    proc = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', *args],
        cwd=cwd,
        env=child_env(DING_PROGRESS='0', DING_QUIET='1', OMP_NUM_THREADS='1'),
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    err.close()
    return proc


def stop(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def rank_pids(launcher_pid):
    """``{rank: pid}`` of the rank processes the launcher started (its children, RANK in their environment)."""
    ranks = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
            if int(fields[1]) != launcher_pid or fields[0] == 'Z':
                continue
            with open(f'/proc/{entry}/environ', 'rb') as f:
                env = dict(v.split(b'=', 1) for v in f.read().split(b'\0') if b'=' in v)
        except (OSError, ValueError):
            continue
        if b'RANK' in env:
            ranks[int(env[b'RANK'])] = int(entry)
    return ranks


def alive(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def digests(exp):
    """The last parameter digest each rank logged: rank 0's learner log and rank 1's."""
    found = []
    for log in (exp / 'log/learner/learner_logger.txt', exp / 'log/rank1/log/learner/learner_logger.txt'):
        found.append(re.findall(r'parameters digest ([0-9a-f]+)', log.read_text())[-1])
    return found


# ---- the agreements, one process and two ----------------------------------------------------------------
def test_a_limit_stops_the_loop_on_the_runs_totals():
    assert stop_reason(100, 5, None, None) is None
    assert stop_reason(100, 5, 100, None) == 'max_env_step reached'  # env steps summed over the ranks
    assert stop_reason(99, 5, 100, 5) == 'max_train_iter reached'
    assert stop_reason(99, 4, 100, 5) is None


def test_one_process_agrees_with_itself_without_a_group():
    group = RankGroup.current()
    assert (group.rank, group.world_size, group.is_main, group.several) == (0, 1, True, False)
    assert group.any(True) and not group.all(False) and group.total(7) == 7 and group.smallest(3) == 3
    assert group.share_texts('run', '') == ['run', '']
    assert group.log_exp_name('exp') == 'exp'
    assert RankGroup(2, 3).log_exp_name('exp') == os.path.join('exp', 'log', 'rank2')


AGREE = """
import json
from ding.entry.rank_group import join_rank_group_from_environment, leave_rank_group
group = join_rank_group_from_environment(cuda=False)
r = group.rank
print(json.dumps(dict(
    stop=group.any(r == 1), ready=group.all(r == 1), everyone=group.all(True), envstep=group.total(100 + r),
    rollout=group.smallest(256 + 8 * r), shared=group.share_texts('exp_' + str(r), 'ckpt' if r == 0 else ''),
)))
leave_rank_group()
"""


def test_two_ranks_take_every_decision_together(tmp_path):
    port = str(find_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, '-c', AGREE],
            env=child_env(RANK=str(r), WORLD_SIZE='2', MASTER_ADDR='127.0.0.1', MASTER_PORT=port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            stop(p)
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    for out, _ in outs:
        # One rank wants to stop: both stop. One rank lacks a batch: neither trains. Env steps summed, the
        # rollout cut to the shorter, rank 0's run directory everywhere.
        assert json.loads(out) == dict(
            stop=True, ready=False, everyone=True, envstep=201, rollout=256, shared=['exp_0', 'ckpt']
        )


def test_the_progress_file_tells_the_launcher_where_rank_0_was(tmp_path):
    path = str(tmp_path / 'progress')
    assert read_rank_progress(path) is None
    progress = RankProgressFile(path)
    progress.start('cartpole_dqn_seed0_251125_120000', 40)
    for it in range(41, 1234):
        progress.update(it)
    progress.close()
    assert read_rank_progress(path) == ('cartpole_dqn_seed0_251125_120000', 1233)


# ---- the launcher -----------------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def killed_run(tmp_path_factory):
    """A 2-rank CartPole DQN run whose rank 1 is SIGKILLed once a periodic checkpoint exists; the launcher
    restarts both ranks from it and the run goes on to the stop value."""
    tmp_path = tmp_path_factory.mktemp('killed')
    config = write_config(
        tmp_path,
        'cartpole_dqn_config.py',
        **{
            'stop_value=195': 'stop_value=80',
            'learning_rate=0.001,': 'learning_rate=0.001, '
            f'learner=dict(hook=dict(save_ckpt_after_iter={CHECKPOINT_EVERY})),',
        },
    )
    proc = start_ding(['-m', 'serial', '-c', config, '-s', '0', '--nproc', '2'], tmp_path)
    exp = tmp_path / 'cartpole_dqn_seed0'
    try:
        checkpoint = exp / 'ckpt' / f'iteration_{CHECKPOINT_EVERY}.safetensors'
        wait_until(checkpoint.exists, 240, what='the first periodic checkpoint', proc=proc)
        ranks = wait_until(lambda: rank_pids(proc.pid), 10, what='the rank processes')
        os.kill(ranks[1], signal.SIGKILL)
        proc.wait(timeout=300)
    finally:
        stop(proc)
    return proc.returncode, (tmp_path / 'stderr.txt').read_text(), exp


@pytest.mark.slow
def test_a_killed_rank_restarts_the_group_from_the_newest_checkpoint(killed_run):
    code, err, exp = killed_run
    assert code == 0, err[-3000:]
    assert '[ding] rank 1 was killed by SIGKILL; stopping the other ranks' in err
    restart = re.search(r'restart 1 of 3: starting 2 ranks from (\S+) \(iteration (\d+)\).*\((\d+) repeated\)', err)
    assert restart, err[-3000:]
    assert 0 <= int(restart.group(3)) <= CHECKPOINT_EVERY  # at most one checkpoint interval is done again
    assert re.search(r'\[ding\] cartpole_dqn_seed0: SOLVED \| stop value 80 ', err), err[-3000:]


@pytest.mark.slow
def test_every_rank_ends_with_the_same_parameters_and_rank_0_alone_saves(killed_run):
    code, err, exp = killed_run
    rank0, rank1 = digests(exp)
    assert rank0 == rank1
    assert "'world_size': 2," in (exp / 'total_config.py').read_text()
    assert '[ding] 2 ranks (gloo)' in err
    assert (exp / 'log/rank1/log/collector/collector_logger.txt').is_file()  # rank 1 writes under log/rank1 only
    assert not list((exp / 'log/rank1').rglob('*.safetensors')) and not (exp / 'log/rank1/total_config.py').exists()


@pytest.mark.slow
def test_ctrl_c_stops_every_rank(tmp_path):
    config = os.path.join(CARTPOLE, 'cartpole_dqn_config.py')
    proc = start_ding(['-m', 'serial', '-c', config, '-s', '0', '--nproc', '2'], tmp_path)
    try:
        err = tmp_path / 'stderr.txt'
        wait_until(lambda: '[ding] 2 ranks (gloo)' in err.read_text(), 240, what='the ranks to start', proc=proc)
        time.sleep(1.0)  # training
        ranks = rank_pids(proc.pid)
        assert sorted(ranks) == [0, 1]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        wait_until(lambda: not any(alive(pid) for pid in ranks.values()), 10, what='no rank left')
    finally:
        stop(proc)
    err = (tmp_path / 'stderr.txt').read_text()
    assert '[ding] SIGINT: stopping the 2 ranks' in err
    assert 'ding: interrupted; checkpoint written by this run: ./cartpole_dqn_seed0/ckpt/interrupt_iteration_' in err
    assert list((tmp_path / 'cartpole_dqn_seed0' / 'ckpt').glob('interrupt_iteration_*.safetensors')), err[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    'mode, config, exp_name',
    [
        ('serial_onpolicy', 'cartpole_ppo_config.py', 'cartpole_ppo_seed0'),
        ('async', 'cartpole_impala_config.py', 'cartpole_impala_seed0'),
    ],
)
def test_on_policy_and_async_runs_train_two_ranks_alike(tmp_path, mode, config, exp_name):
    proc = start_ding(['-m', mode, '-c', os.path.join(CARTPOLE, config), '--nproc', '2', '--train-iter', '8'], tmp_path)
    try:
        proc.wait(timeout=240)
    finally:
        stop(proc)
    err = (tmp_path / 'stderr.txt').read_text()
    assert proc.returncode == 0, err[-3000:]
    assert f'[ding] {exp_name}: not solved (max_train_iter reached)' in err
    rank0, rank1 = digests(tmp_path / exp_name)
    assert rank0 == rank1


def test_cpu_affinity_is_refused_on_several_ranks_before_any_work(tmp_path):
    config = write_config(
        tmp_path, 'cartpole_impala_config.py', **{'double_buffer=False,': 'double_buffer=False, cpu_affinity=[0],'}
    )
    proc = start_ding(['-m', 'async', '-c', config, '--nproc', '2', '--train-iter', '1'], tmp_path)
    try:
        proc.wait(timeout=120)
    finally:
        stop(proc)
    err = (tmp_path / 'stderr.txt').read_text()
    assert proc.returncode == 2, err[-3000:]
    assert 'policy.async_actor.cpu_affinity confines one process; with 2 ranks' in err
    assert not (tmp_path / 'cartpole_impala_seed0' / 'ckpt').exists()
