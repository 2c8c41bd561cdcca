import pytest
import torch

from ding.policy import APPOPolicy
from tests.helpers.unrolls import CueRecall, UnrollCollector, cue_recall_policy, train_on_cue_recall


def make_policy(lstm_hidden_size=None, **learn):
    return cue_recall_policy(APPOPolicy, lstm_hidden_size, **learn)


@pytest.mark.parametrize('advantage_type', ['vtrace', 'gae'])
def test_the_lstm_model_learns_the_memory_task(advantage_type):
    torch.manual_seed(0)
    policy = make_policy(32, advantage_type=advantage_type, epoch_per_collect=2)
    assert train_on_cue_recall(policy, updates=60) > 0.9


def test_each_epoch_is_one_logged_optimizer_step():
    policy = make_policy(epoch_per_collect=3)
    infos = policy.learn_mode.forward(UnrollCollector(policy, CueRecall(4)).collect(6))
    assert len(infos) == 3
    assert all(set(policy.learn_mode.monitor_vars()) <= set(info) for info in infos)
    assert infos[0]['approx_kl'] == pytest.approx(0.0, abs=1e-6)  # the first step is on fresh weights
    assert infos[0]['importance_ratio_mean'] == pytest.approx(1.0, abs=1e-5)


def test_on_fresh_data_vtrace_and_gae_value_targets_agree():
    torch.manual_seed(0)
    vtrace_policy = make_policy(advantage_type='vtrace', lambda_=0.9)
    gae_policy = make_policy(advantage_type='gae', lambda_=0.9)
    batch = vtrace_policy._prepare_batch(UnrollCollector(vtrace_policy, CueRecall(4)).collect(8))
    value = torch.randn(9, 4)
    log_rhos = torch.zeros(8, 4)  # every ratio 1: the behaviour policy is the learner's
    vtrace_return, vtrace_adv = vtrace_policy._targets(batch, log_rhos, value)
    gae_return, gae_adv = gae_policy._targets(batch, log_rhos, value)
    torch.testing.assert_close(vtrace_return, gae_return)
    # the two advantages differ by design (one-step on V-trace targets vs GAE) but both skip the reset steps
    assert (vtrace_adv[batch['mask'] == 0] == 0).all() and (gae_adv[batch['mask'] == 0] == 0).all()


def test_bad_keys_are_named():
    with pytest.raises(ValueError, match='advantage_type'):
        make_policy(advantage_type='td')
    with pytest.raises(ValueError, match='epoch_per_collect'):
        make_policy(epoch_per_collect=0)
