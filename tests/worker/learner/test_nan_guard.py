"""The NaN guard on a real DQN learner: batches with a NaN reward make the loss and gradients NaN."""

import math
import os

import pytest
import torch
from easydict import EasyDict

from ding.policy.dqn import DQNPolicy
from ding.utils.checkpoint import load_checkpoint
from ding.utils.pytorch_ddp_dist_helper import DDPContext
from ding.worker.learner import BaseLearner
from ding.worker.learner.nan_guard import (
    NanGuard,
    NanGuardError,
    add_nan_guard_listener,
    build_nan_guard_hook,
    grads_finite,
    remove_nan_guard_listener,
)
from tests.helpers.dist_ranks import run_ranks, write_result

BATCH = 16
LR = 0.01


def make_dqn(seed: int = 0) -> DQNPolicy:
    cfg = DQNPolicy.default_config()
    cfg.model = EasyDict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[16, 16], dueling=False)
    cfg.learn.learning_rate = LR
    cfg.learn.batch_size = BATCH
    torch.manual_seed(seed)
    return DQNPolicy(cfg, enable_field=['learn'])


def make_batch(it: int, nan: bool = False) -> dict:
    g = torch.Generator().manual_seed(it)
    batch = {
        'obs': torch.randn(BATCH, 4, generator=g),
        'next_obs': torch.randn(BATCH, 4, generator=g),
        'action': torch.randint(0, 2, (BATCH,), generator=g),
        'reward': torch.rand(BATCH, generator=g),
        'done': torch.zeros(BATCH, dtype=torch.bool),
    }
    if nan:
        batch['reward'][3] = float('nan')  # one bad transition poisons the mean loss
    return batch


def make_learner(nan_guard=None, **hook) -> BaseLearner:
    hooks = dict(
        load_ckpt_before_run='', log_show_after_iter=1, save_ckpt_after_iter=0, save_ckpt_after_run=False, keep_n=0
    )
    hooks.update(hook)
    cfg = dict(hook=hooks)
    if nan_guard is not None:
        cfg['nan_guard'] = nan_guard
    learner = BaseLearner(cfg, make_dqn().learn_mode, exp_name='exp')
    learner.call_hook('before_run')  # attaches the guard, as the serial entry and start() do
    return learner


def params(learner) -> list:
    return [p.detach().clone() for p in learner.policy.get_attribute('model').parameters()]


def lr_of(learner) -> float:
    return learner.policy.get_attribute('optimizer').param_groups[0]['lr']


def log_text(tmp_path) -> str:
    return (tmp_path / 'exp' / 'log' / 'learner' / 'learner_logger.txt').read_text()


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    opened = []
    yield opened
    for learner in opened:
        learner.close()


def test_nan_batch_skips_the_step_and_cuts_the_lr(tmp_path, in_tmp):
    learner = make_learner(nan_guard=dict(lr_cut_factor=0.5, max_consecutive_bad=3))
    in_tmp.append(learner)
    for it in range(2):
        learner.train(make_batch(it))
    before = params(learner)
    adam_steps = [s['step'].item() for s in learner.policy.get_attribute('optimizer').state.values()]

    info = learner.train(make_batch(2, nan=True))

    assert math.isnan(info['total_loss'])  # the policy really saw a NaN loss
    after = params(learner)
    assert all(torch.equal(a, b) for a, b in zip(before, after)), 'the bad step must not touch the parameters'
    assert all(torch.isfinite(p).all() for p in after)
    assert [s['step'].item() for s in learner.policy.get_attribute('optimizer').state.values()] == adam_steps
    assert lr_of(learner) == pytest.approx(LR * 0.5)
    assert learner.nan_guard_events == {'skipped_step': 1, 'rollback': 0, 'rollback_failed': 0}
    assert learner.nan_guard.consecutive_bad == 1
    text = log_text(tmp_path)
    assert 'nan_guard: non-finite gradient at iteration 2' in text and 'skipped the optimizer step' in text
    # The per-iteration count reaches the learner's log table (and with it tensorboard).
    assert 'nan_guard_skipped_steps | 1' in text

    learner.train(make_batch(3))  # a good batch trains again, at the reduced rate
    assert not all(torch.equal(a, b) for a, b in zip(after, params(learner)))
    assert learner.nan_guard.consecutive_bad == 0
    assert lr_of(learner) == pytest.approx(LR * 0.5)


def test_consecutive_bad_steps_roll_back_to_the_last_checkpoint(tmp_path, in_tmp):
    learner = make_learner(nan_guard=dict(lr_cut_factor=0.5, max_consecutive_bad=3), save_ckpt_after_iter=4)
    in_tmp.append(learner)
    for it in range(5):  # checkpoint iteration_4, then one more update
        learner.train(make_batch(it))
    ckpt = tmp_path / 'exp' / 'ckpt' / 'iteration_4.safetensors'
    saved = load_checkpoint(str(ckpt))
    pre_rollback = params(learner)
    assert not all(torch.equal(a, b) for a, b in zip(pre_rollback, saved['model'].values()))

    for it in range(5, 8):
        learner.train(make_batch(it, nan=True))

    model = learner.policy.get_attribute('model')
    for name, value in model.state_dict().items():
        assert torch.equal(value, saved['model'][name]), name
    assert learner.train_iter == 4  # the iteration counter went back with the weights
    assert learner.nan_guard_events == {'skipped_step': 3, 'rollback': 1, 'rollback_failed': 0}
    assert learner.nan_guard.last_rollback_path.endswith('iteration_4.safetensors')
    assert lr_of(learner) == pytest.approx(LR * 0.5**3)  # the cuts survive the optimizer state reload
    text = log_text(tmp_path)
    assert 'nan_guard: rolled back to ./exp/ckpt/iteration_4.safetensors (iteration 8 -> 4)' in text
    assert 'nan_guard_rollbacks     | 1' in text

    learner.train(make_batch(8))  # and training goes on from there
    assert learner.train_iter == 5 and learner.nan_guard.rollbacks_since_good == 0


def test_no_checkpoint_to_roll_back_to_is_counted_and_training_continues(tmp_path, in_tmp):
    learner = make_learner(nan_guard=dict(max_consecutive_bad=2))
    in_tmp.append(learner)
    learner.train(make_batch(0))
    good = params(learner)
    for it in range(1, 3):
        learner.train(make_batch(it, nan=True))
    assert learner.nan_guard_events == {'skipped_step': 2, 'rollback': 0, 'rollback_failed': 1}
    assert all(torch.equal(a, b) for a, b in zip(good, params(learner)))
    assert 'no usable checkpoint' in log_text(tmp_path)


def test_rollbacks_without_progress_stop_training(tmp_path, in_tmp):
    learner = make_learner(nan_guard=dict(max_consecutive_bad=1, max_rollbacks=1), save_ckpt_after_iter=1)
    in_tmp.append(learner)
    learner.train(make_batch(0))
    learner.train(make_batch(1, nan=True))  # first rollback
    assert learner.nan_guard_events['rollback'] == 1
    with pytest.raises(NanGuardError, match='training keeps diverging'):
        learner.train(make_batch(2, nan=True))


def test_disabled_guard_lets_nan_through(tmp_path, in_tmp):
    learner = make_learner(nan_guard=dict(enable=False))
    in_tmp.append(learner)
    assert learner.nan_guard is None and learner.nan_guard_events == {}
    learner.train(make_batch(0, nan=True))
    assert not all(torch.isfinite(p).all() for p in params(learner))  # what the guard prevents


def test_guard_is_on_by_default_and_as_a_full_form_hook(tmp_path, in_tmp):
    learner = make_learner()
    in_tmp.append(learner)
    assert isinstance(learner.nan_guard, NanGuard)
    custom = make_learner(
        nan_guard=dict(enable=False),
        guard=dict(type='nan_guard', position='before_run', ext_args=dict(lr_cut_factor=0.1)),
    )
    in_tmp.append(custom)
    custom.train(make_batch(0, nan=True))
    assert custom.nan_guard_events['skipped_step'] == 1 and lr_of(custom) == pytest.approx(LR * 0.1)


@pytest.mark.parametrize(
    'bad,needle',
    [
        (dict(lr_cut_factor=0), 'nan_guard.lr_cut_factor'),
        (dict(max_consecutive_bad=0), 'nan_guard.max_consecutive_bad'),
        (dict(enable='yes'), 'nan_guard.enable'),
        (dict(max_bad=3), "unknown key(s) ['max_bad']"),
    ],
)
def test_bad_guard_config_names_the_key(bad, needle):
    with pytest.raises(ValueError) as exc:
        build_nan_guard_hook(bad)
    assert needle in str(exc.value)


def test_grads_finite_checks_nan_and_inf():
    grads = [torch.ones(3, 3), torch.zeros(5)]
    assert grads_finite(grads) and grads_finite([])
    grads[1][2] = float('inf')
    assert not grads_finite(grads)
    grads[1][2] = float('nan')
    assert not grads_finite(grads)
    # Huge but finite float32 / float16 values: their norm would overflow in their own precision.
    assert grads_finite([torch.full((1000,), 3e38), torch.full((10,), 6e4, dtype=torch.float16)])
    assert grads_finite([torch.ones(4).to_sparse()]) and not grads_finite(
        [torch.tensor([1.0, float('nan')]).to_sparse()]
    )


def test_events_are_counted_in_the_run_metrics(tmp_path, in_tmp):
    from ding.service.metrics import ServiceMetrics, parse_metrics, sample_value

    # What ServiceRuntime does when it starts its metrics: the guard reports to the service's listener.
    metrics = ServiceMetrics(exp_name='exp')
    add_nan_guard_listener(metrics.nan_guard_event)
    try:
        learner = make_learner(nan_guard=dict(max_consecutive_bad=2), save_ckpt_after_iter=1)
        in_tmp.append(learner)
        learner.train(make_batch(0))
        for it in range(1, 3):
            learner.train(make_batch(it, nan=True))
        parsed = parse_metrics(metrics.text().decode())
        assert sample_value(parsed, 'nan_guard_events_total', kind='skipped_step') == 2
        assert sample_value(parsed, 'nan_guard_events_total', kind='rollback') == 1
    finally:
        remove_nan_guard_listener(metrics.nan_guard_event)


def _rollback_on_rank(rank: int, port: int, out_dir: str) -> None:
    """One rank of a 2-rank group: train, then NaN batches on rank 1 only (the averaged gradients are NaN on
    both), until both roll back. Only rank 0 writes checkpoints; rank 1 logs in a directory of its own."""
    os.chdir(out_dir)
    with DDPContext(init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2, timeout=30):
        hooks = dict(
            load_ckpt_before_run='', log_show_after_iter=100, save_ckpt_after_iter=4, save_ckpt_after_run=False
        )
        learner = BaseLearner(
            dict(hook=hooks, nan_guard=dict(max_consecutive_bad=3)),
            make_dqn(seed=rank).learn_mode,  # different seeds: the policy takes rank 0's weights at start
            exp_name='exp' if rank == 0 else 'exp/log/rank1',
        )
        learner.call_hook('before_run')
        for it in range(5):
            learner.train(make_batch(2 * it + rank))
        for it in range(5, 8):
            learner.train(make_batch(2 * it + rank, nan=rank == 1))
        saved = load_checkpoint(os.path.join(out_dir, 'exp', 'ckpt', 'iteration_4.safetensors'))['model']
        model = learner.policy.get_attribute('model').state_dict()
        result = {
            'iter': learner.train_iter,
            'events': learner.nan_guard_events,
            'at_checkpoint': all(torch.equal(v, saved[k]) for k, v in model.items()),
            'weights': [v.tolist() for v in model.values()],
        }
        learner.close()
    write_result(out_dir, rank, result)


def test_every_rank_of_a_group_rolls_back_to_rank_0s_checkpoint(tmp_path):
    rank0, rank1 = run_ranks(_rollback_on_rank, str(tmp_path))
    for res in (rank0, rank1):
        assert res['iter'] == 4 and res['at_checkpoint'], res['iter']
        assert res['events'] == {'skipped_step': 3, 'rollback': 1, 'rollback_failed': 0}
    assert rank0['weights'] == rank1['weights']
    assert not (tmp_path / 'exp' / 'log' / 'rank1' / 'ckpt').exists()  # rank 1 read rank 0's, wrote none
