"""Data-parallel learners in the parallel pipeline (docs/parallel.md, "Several learners"): two real learner
processes join one torch.distributed group (gloo) and train CartPole DQN on a finite amount of data that two
real collectors gather (the naive commander: three collect tasks, samples consumed once), with each way of
assigning the collectors' data to the learners. Every run must end by itself, with both ranks stopped after
the same iteration and every pushed sample trained exactly once, or counted as left.
"""

import copy
import os
import signal
import time

import pytest

from ding.config.loader import read_config
from ding.entry.parallel_entry import parallel_pipeline
from tests.helpers.parallel_run import PipelineThread, ready_pid
from tests.helpers.processes import worker_pids
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

CONFIG = os.path.join(
    os.path.dirname(__file__),
    '..',
    '..',
    'dizoo',
    'classic_control',
    'cartpole',
    'config',
    'parallel',
    'cartpole_dqn_two_learners_config.py',
)
BATCH = 16
SAMPLES_PER_TASK = 32
TASKS = 3


def finite_run(tmp_path_factory, assignment, on_group_done='assist'):
    """One run of the two-learner config on three collect tasks of 32 samples, consumed once."""
    main, create, system = read_config(CONFIG)
    main, create, system = copy.deepcopy(main), copy.deepcopy(create), copy.deepcopy(system)
    main.exp_name = f'multi_learner_{assignment}_{on_group_done}'
    main.policy.learn.batch_size = BATCH
    main.policy.learn.learner.multi_learner.update(assignment=assignment, on_group_done=on_group_done)
    main.policy.collect.collector.update(n_sample=SAMPLES_PER_TASK, chunk_size=SAMPLES_PER_TASK)
    main.policy.other.replay_buffer = dict(replay_buffer_size=1000, priority=False, max_use=1)
    main.policy.other.commander = dict(collector_task_num=TASKS, learner_task_num=1, collect_setting=dict(eps=0.5))
    create.commander = dict(type='naive')
    system.coordinator = dict()
    system.learner = dict(learner0=dict(), learner1=dict())
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp(assignment + on_group_done))
    try:
        result = parallel_pipeline((main, create, system), seed=0)
        assert worker_pids(os.getcwd()) == []
    finally:
        os.chdir(cwd)
    return result


@pytest.fixture(scope='module', autouse=True)
def _quiet():
    os.environ['DING_PROGRESS'] = '0'
    yield
    os.environ.pop('DING_PROGRESS', None)


@pytest.fixture(scope='module')
def random_run(tmp_path_factory):
    return finite_run(tmp_path_factory, 'random')


@pytest.fixture(scope='module')
def assist_run(tmp_path_factory):
    return finite_run(tmp_path_factory, 'bins', 'assist')


@pytest.fixture(scope='module')
def short_run(tmp_path_factory):
    return finite_run(tmp_path_factory, 'bins', 'short')


def group_of(result):
    group = result.summary['multi_learner']
    assert group is not None and group['world_size'] == 2
    return group


def assert_lock_step(result, group):
    """Both ranks were given the same batches and stopped after the same iteration, the one rank 0 reported."""
    assert group['served_batches'][0] == group['served_batches'][1] == group['rounds']
    assert group['final_iters'] == [group['rounds'], group['rounds']]
    assert result.train_iter == group['rounds'] - 1  # the coordinator counts rank 0's last iteration index


def test_random_trains_every_sample_once(random_run):
    group = group_of(random_run)
    pushed = random_run.summary['pushed_samples']
    assert pushed >= TASKS * SAMPLES_PER_TASK
    assert group['served_samples'] + group['left_samples'] == pushed
    assert group['left_samples'] < 2  # fewer than one sample per batch of a round
    assert group['duplicate_samples'] == 0  # consumed once: no sample goes to two ranks
    assert_lock_step(random_run, group)
    assert 'collector tasks are done' in random_run.reason


def test_bins_assist_drains_every_bin(assist_run):
    group = group_of(assist_run)
    pushed = assist_run.summary['pushed_samples']
    assert group['served_samples'] + group['left_samples'] == pushed
    assert group['left_samples'] < 2
    # three tasks on two collectors: one bin got twice the data, and its learner helped the other
    assert group['assisted_batches'] > 0
    assert_lock_step(assist_run, group)


def test_bins_short_ends_when_one_bin_is_exhausted(short_run):
    group = group_of(short_run)
    pushed = short_run.summary['pushed_samples']
    assert group['served_samples'] + group['left_samples'] == pushed
    assert group['left_samples'] >= SAMPLES_PER_TASK // 2  # the fuller bin's rest, counted
    assert group['assisted_batches'] == 0
    assert 'short' in group['finish_reason']
    assert_lock_step(short_run, group)


def test_two_learner_cartpole_config_solves_through_a_sigkilled_rank(tmp_path, monkeypatch):
    """The shipped config: two data-parallel learners on the shared replay buffer reach the stop value, even
    with learner1 SIGKILLed mid-run: the pipeline restarts it, the group re-forms (rank 1 takes rank 0's learner
    state) and both ranks go on in lock step."""
    monkeypatch.chdir(tmp_path)
    exp = 'cartpole_dqn_two_learners'
    with PipelineThread(CONFIG) as run:
        assert wait_until(lambda: ready_pid(exp, 'learner1') is not None, 120)
        victim = ready_pid(exp, 'learner1')
        assert wait_until(lambda: os.path.isdir(f'{exp}/policy') and os.listdir(f'{exp}/policy'), 120)
        time.sleep(2.0)  # a few hundred iterations of training first
        os.kill(victim, signal.SIGKILL)
    result = run.result
    assert result.solved, result.reason
    assert result.restarts['learner1'] == 1
    assert any(f['kind'] == 'learner' for f in result.summary['failed_tasks'])
    group = group_of(result)
    assert group['assignment'] == 'random' and group['rounds'] > 0
    assert group['served_batches'][0] == group['served_batches'][1]
    with open(f'{exp}/log/comm_learner1/comm_learner1_logger.txt') as f:
        assert "took rank 0's state" in f.read()  # its optimizer moments and iteration: no drift after a rejoin
    assert os.listdir(exp).count('ckpt_learner1') == 0  # rank 0 alone writes checkpoints
    assert worker_pids(str(tmp_path)) == []
