"""Checkpoint hooks on a real learner: periodic saves, pruning, resume == straight run, DI-engine files."""

import os

import pytest
import torch

from ding.utils.checkpoint import load_checkpoint, read_manifest
from ding.worker.learner import BaseLearner
from tests.helpers.learner_policies import learner_cfg, make_batch, make_policy


def ckpt_files(dirname='default_experiment/ckpt'):
    return sorted(os.listdir(dirname)) if os.path.isdir(dirname) else []


@pytest.fixture
def learners(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = []

    def make(cfg, policy=None, **kwargs):
        lrn = BaseLearner(cfg, policy if policy is not None else make_policy(), **kwargs)
        made.append(lrn)
        return lrn

    yield make
    for lrn in made:
        lrn.close()


def test_save_every_n_iterations_names_and_keep_n(learners):
    lrn = learners(learner_cfg(save_ckpt_after_iter=3, save_ckpt_after_run=True, keep_n=2))
    for it in range(7):
        lrn.train(make_batch(it))
        if it == 2:  # the 3rd iteration completed
            assert ckpt_files() == ['iteration_3.manifest.json', 'iteration_3.safetensors']
    # Saved after iterations 3 and 6; keep_n=2 keeps both so far.
    assert ckpt_files() == [
        'iteration_3.manifest.json',
        'iteration_3.safetensors',
        'iteration_6.manifest.json',
        'iteration_6.safetensors',
    ]
    for it in range(7, 12):
        lrn.train(make_batch(it))
    # 9 and the newest kept, 3 and 6 pruned.
    assert ckpt_files() == [
        'iteration_12.manifest.json',
        'iteration_12.safetensors',
        'iteration_9.manifest.json',
        'iteration_9.safetensors',
    ]
    manifest = read_manifest('default_experiment/ckpt/iteration_12')
    assert manifest['last_iter'] == 12
    # after_run at iteration 12 finds that iteration already saved and writes nothing new.
    lrn.call_hook('after_run')
    assert len(ckpt_files()) == 4
    lrn.train(make_batch(12))
    lrn.call_hook('after_run')
    assert 'iteration_13.safetensors' in ckpt_files()
    state = load_checkpoint('default_experiment/ckpt/iteration_13')
    assert state['last_iter'] == 13
    assert torch.equal(state['model']['0.weight'], lrn.policy.state_dict()['model']['0.weight'])


def test_instance_name_and_named_saves(learners):
    lrn = learners(learner_cfg(save_ckpt_after_iter=2), exp_name='exp', instance_name='learner1')
    lrn.train(make_batch(0))
    lrn.train(make_batch(1))
    assert ckpt_files('exp/ckpt_learner1') == ['iteration_2.manifest.json', 'iteration_2.safetensors']
    # DI-engine code passes names with '.pth.tar'; the checkpoint module adds its own suffix.
    path = lrn.save_checkpoint('ckpt_best.pth.tar')
    assert path == os.path.join('.', 'exp', 'ckpt_learner1', 'ckpt_best.safetensors')
    assert lrn.ckpt_name is None  # reset after the save
    assert load_checkpoint(path)['last_iter'] == 2


def test_only_rank_0_writes(learners):
    lrn = learners(learner_cfg(save_ckpt_after_iter=1, save_ckpt_after_run=True), dist_info=(1, 2))
    assert lrn.rank == 1 and lrn.world_size == 2
    # world_size > 1 switches the log reduce hook on; without an initialised process group it does nothing.
    assert [h.name for h in lrn.hooks['after_iter']] == ['log_reduce_after_iter', 'save_ckpt_after_iter']
    lrn.train(make_batch(0))
    lrn.call_hook('after_run')
    assert lrn.save_checkpoint() is None
    assert not os.path.exists('default_experiment/ckpt')


def _params_and_optimizer(learner):
    state = learner.policy.state_dict()
    params = {k: v.clone() for k, v in state['model'].items()}
    opt = state['optimizer']['state']
    opt_tensors = {(i, k): (v.clone() if torch.is_tensor(v) else v) for i, s in opt.items() for k, v in s.items()}
    return params, opt_tensors


def test_resume_equals_straight_run(learners):
    n, m = 5, 4
    # First run: N iterations, then save (with env steps, as the serial pipeline passes them).
    first = learners(learner_cfg(save_ckpt_after_iter=n))
    for it in range(n):
        first.train(make_batch(it), envstep=100 * (it + 1))
    path = 'default_experiment/ckpt/iteration_5'
    assert os.path.exists(path + '.safetensors')
    first.close()

    # A fresh learner with different initial weights loads it in before_run, then trains M more.
    resumed = learners(learner_cfg(load_ckpt_before_run=path), policy=make_policy(seed=123))
    torch.manual_seed(999)  # disturb the global RNG: the checkpoint's RNG state must win
    resumed.call_hook('before_run')
    assert resumed.train_iter == n and resumed.collector_envstep == 500
    for it in range(n, n + m):
        resumed.train(make_batch(it))

    straight = learners(learner_cfg())
    for it in range(n + m):
        straight.train(make_batch(it))

    p1, o1 = _params_and_optimizer(resumed)
    p2, o2 = _params_and_optimizer(straight)
    assert p1.keys() == p2.keys() and o1.keys() == o2.keys()
    for k in p1:
        assert torch.equal(p1[k], p2[k]), k
    for k in o1:
        assert torch.equal(torch.as_tensor(o1[k]), torch.as_tensor(o2[k])), k
    assert resumed.train_iter == straight.train_iter == n + m


def test_resume_without_rng_restore_differs(learners):
    """The model has dropout: the test above fails if the RNG state is not restored (control experiment)."""
    first = learners(learner_cfg())
    for it in range(3):
        first.train(make_batch(it))
    state = first.policy.state_dict()
    second = learners(learner_cfg(), policy=make_policy(seed=7))
    second.policy.load_state_dict(state)
    torch.manual_seed(999)
    second.train(make_batch(3))
    first.train(make_batch(3))
    w1 = first.policy.state_dict()['model']['0.weight']
    w2 = second.policy.state_dict()['model']['0.weight']
    assert not torch.equal(w1, w2)


def test_load_di_engine_pth_tar(learners):
    source = make_policy(seed=3).learn_mode
    legacy = dict(source.state_dict(), last_iter=7)
    os.makedirs('old', exist_ok=True)
    torch.save(legacy, 'old/iteration_7.pth.tar')
    lrn = learners(learner_cfg(load_ckpt_before_run='old/iteration_7.pth.tar'))
    lrn.call_hook('before_run')
    assert lrn.train_iter == 7
    for k, v in lrn.policy.state_dict()['model'].items():
        assert torch.equal(v, legacy['model'][k]), k


def test_missing_ckpt_file_raises_naming_it(learners):
    from ding.utils.checkpoint import CheckpointError

    lrn = learners(learner_cfg(load_ckpt_before_run='nowhere/iteration_1'))
    with pytest.raises(CheckpointError, match='nowhere/iteration_1'):
        lrn.call_hook('before_run')
