"""``BaseLearner.train`` on a real policy: priority info, log routing, log table, hook timings, tensorboard."""

import json
import multiprocessing as mp
import os
import re
import time

import pytest

from ding.utils.collate import default_collate
from ding.worker.learner import BaseLearner, LearnerHook
from tests.helpers.learner_policies import learner_cfg, make_batch, make_policy, read_tb_events

LOG_FILE = 'default_experiment/log/learner/learner_logger.txt'
TB_DIR = 'default_experiment/log/learner/learner'


class SnapshotHook(LearnerHook):
    """Copies the log buffers as after_iter hooks see them (priority 15: before the log show clears them)."""

    def __init__(self, name='snapshot', priority=15, position='after_iter', ext_args=None):
        super().__init__(name, priority, position=position, ext_args=ext_args)
        self.seen = []

    def __call__(self, engine):
        self.seen.append({k: dict(v) for k, v in engine.log_buffer.items()})


class SleepHook(LearnerHook):
    def __call__(self, engine):
        time.sleep(self.ext_args['seconds'])


@pytest.fixture
def learners(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = []

    def make(cfg=None, policy=None, **kwargs):
        lrn = BaseLearner(cfg if cfg is not None else learner_cfg(), policy or make_policy(), **kwargs)
        made.append(lrn)
        return lrn

    yield make
    for lrn in made:
        lrn.close()


def test_priority_info_from_a_list_of_samples(learners):
    lrn = learners(policy=make_policy(priority=True))
    batch = make_batch(0)
    log_vars = lrn.train(batch)
    assert set(log_vars) == {'cur_lr', 'total_loss'}  # priority was taken out
    info = lrn.priority_info
    assert info['replay_buffer_idx'] == [s['replay_buffer_idx'] for s in batch]
    assert info['replay_unique_id'] == [s['replay_unique_id'] for s in batch]
    assert len(info['priority']) == 8 and all(p >= 0 for p in info['priority'])
    assert lrn.learn_info == {'learner_step': 1, 'priority_info': info, 'learner_done': False}


def test_priority_info_from_a_collated_batch(learners):
    lrn = learners(policy=make_policy(priority=True))
    batch = make_batch(3)
    lrn.train(default_collate(batch))
    info = lrn.priority_info
    assert info['replay_buffer_idx'] == [s['replay_buffer_idx'] for s in batch]
    assert info['replay_unique_id'] == [s['replay_unique_id'] for s in batch]
    assert len(info['priority']) == 8


def test_histogram_and_scalars_keys_are_routed(learners):
    lrn = learners(learner_cfg(log_show_after_iter=1), policy=make_policy(extra_logs=True))
    snap = SnapshotHook()
    lrn.register_hook(snap)
    log_vars = lrn.train(make_batch(0))
    assert set(log_vars) == {'cur_lr', 'total_loss'}
    seen = snap.seen[0]
    assert seen['scalar'] == {'cur_lr': 0.01, 'total_loss': log_vars['total_loss']}
    assert list(seen['histogram']) == ['abs_error'] and len(seen['histogram']['abs_error']) == 8
    assert list(seen['scalars']) == ['loss_parts']
    assert seen['scalars']['loss_parts']['mse'] == pytest.approx(log_vars['total_loss'])
    # The log show consumed and cleared the buffers.
    assert all(len(buf) == 0 for buf in lrn.log_buffer.values())
    lrn.close()
    events = read_tb_events(TB_DIR)
    assert events['learner/abs_error'] == [(1, 'histo')]
    assert [step for step, _ in events['learner_iter/loss_parts']] == [1, 1]  # mse and mae


def test_log_table_shows_averages_since_last_show(learners):
    lrn = learners(learner_cfg(log_show_after_iter=2))
    losses = [lrn.train(make_batch(it), envstep=10 * (it + 1))['total_loss'] for it in range(4)]
    lrn.close()
    text = open(LOG_FILE).read()
    assert 'learner iteration 2: averages over 2 iterations' in text
    assert 'learner iteration 4: averages over 2 iterations' in text
    second = text[text.index('learner iteration 4') :]
    expected = (losses[2] + losses[3]) / 2
    assert re.search(r'total_loss \| ' + re.escape(f'{expected:.6g}'), second)
    assert re.search(r'cur_lr\s+\| 0.01', second)
    events = read_tb_events(TB_DIR)
    assert [s for s, _ in events['learner_iter/total_loss']] == [2, 4]
    assert [s for s, _ in events['learner_step/total_loss']] == [20, 40]  # x = collector env steps
    assert events['learner_iter/total_loss'][1][1] == pytest.approx(expected, rel=1e-6)


def test_hook_times_are_logged_and_sent_to_tensorboard(learners):
    lrn = learners(learner_cfg(log_show_after_iter=3))
    lrn.register_hook(SleepHook('slow_hook', 10, position='after_iter', ext_args={'seconds': 0.01}))
    for it in range(3):
        lrn.train(make_batch(it))
    lrn.close()
    text = open(LOG_FILE).read()
    row = re.search(r'slow_hook\s+\| after_iter \| 3\s+\| ([\d.]+)\s+\| ([\d.]+)', text)
    assert row is not None, text
    assert float(row.group(1)) >= 10.0 and float(row.group(2)) >= 30.0  # avg ms per call, total ms
    assert re.search(r'log_show\s+\| after_iter \| 2 ', text)  # its own 3rd call is still running
    events = read_tb_events(TB_DIR)
    ((step, ms),) = events['learner_hook_time/slow_hook']
    assert step == 3 and ms >= 10.0


def test_tensorboard_is_only_created_when_something_is_shown(learners):
    quiet = learners(learner_cfg())
    quiet.train(make_batch(0))
    quiet.close()
    assert os.path.exists(LOG_FILE) and not os.path.exists(TB_DIR)
    from tensorboardX import SummaryWriter

    writer = SummaryWriter('given_tb')
    try:
        lrn = learners(learner_cfg(log_show_after_iter=1), tb_logger=writer, exp_name='exp2')
        lrn.train(make_batch(0))
        lrn.close()  # flushes, but does not close, a writer it was given
        assert not os.path.exists('exp2/log/learner/learner')
        writer.add_scalar('still_open', 1.0, 0)
    finally:
        writer.close()  # tensorboardX writes queued events for sure only on close
    events = read_tb_events('given_tb')
    assert 'learner_iter/total_loss' in events and 'still_open' in events


def test_list_of_log_dicts_counts_one_iteration_each(learners):
    lrn = learners(learner_cfg(log_show_after_iter=3))
    snap = SnapshotHook()
    lrn.register_hook(snap)
    log_vars = lrn.train(make_batch(0), policy_kwargs={'epochs': 3})
    assert isinstance(log_vars, list) and len(log_vars) == 3
    assert lrn.train_iter == 3 and len(snap.seen) == 3
    assert [s['scalar']['total_loss'] for s in snap.seen] == [d['total_loss'] for d in log_vars]
    lrn.close()
    assert 'learner iteration 3: averages over 3 iterations' in open(LOG_FILE).read()


def test_train_errors_and_close_is_idempotent(learners):
    lrn = BaseLearner(learner_cfg())
    try:
        with pytest.raises(RuntimeError, match='no policy'):
            lrn.train(make_batch(0))
        with pytest.raises(TypeError, match='learn_mode'):
            lrn.policy = object()
        lrn.policy = make_policy()  # a whole Policy: its learn mode is taken
        lrn.train(make_batch(0))
        assert lrn.train_iter == 1
    finally:
        lrn.close()
        lrn.close()
    with pytest.raises(ValueError, match='train_iterations'):
        BaseLearner(dict(train_iterations=-1))
    with pytest.raises(ValueError, match='log_show_after_iter'):
        BaseLearner(dict(hook=dict(log_show_after_iter=2.5)))


def _reduce_worker(rank, tmpdir):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.chdir(tmpdir)
    dist.init_process_group('gloo', init_method=f'file://{tmpdir}/pg', rank=rank, world_size=2)
    try:
        lrn = BaseLearner(learner_cfg(log_show_after_iter=1), make_policy(), exp_name=f'rank{rank}')
        snap = SnapshotHook(priority=15)
        lrn.register_hook(snap)
        raw = lrn.train(make_batch(rank))['total_loss']
        lrn.close()
        with open(f'{tmpdir}/rank{rank}.json', 'w') as f:
            json.dump(
                {
                    'raw': raw,
                    'reduced': snap.seen[0]['scalar']['total_loss'],
                    'hooks': [h.name for h in lrn.hooks['after_iter']],
                },
                f,
            )
    finally:
        dist.destroy_process_group()


def test_log_reduce_averages_over_ranks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = mp.get_context('fork')
    procs = [ctx.Process(target=_reduce_worker, args=(r, str(tmp_path))) for r in range(2)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    r0, r1 = (json.load(open(tmp_path / f'rank{r}.json')) for r in range(2))
    assert r0['hooks'] == ['log_reduce_after_iter', 'snapshot', 'log_show']
    assert r0['raw'] != r1['raw']
    assert r0['reduced'] == pytest.approx((r0['raw'] + r1['raw']) / 2)
    assert r1['reduced'] == pytest.approx(r0['reduced'])
    # Only rank 0 shows the log.
    assert 'averages over 1 iterations' in open(tmp_path / 'rank0/log/learner/learner_logger.txt').read()
    assert 'averages over' not in open(tmp_path / 'rank1/log/learner/learner_logger.txt').read()


def test_log_reduce_is_a_no_op_without_process_group(learners):
    lrn = learners(
        dict(
            hook=dict(
                log_reduce_after_iter=True, log_show_after_iter=0, save_ckpt_after_iter=0, save_ckpt_after_run=False
            )
        )
    )
    snap = SnapshotHook(priority=15)
    lrn.register_hook(snap)
    raw = lrn.train(make_batch(0))['total_loss']
    assert snap.seen[0]['scalar']['total_loss'] == raw
