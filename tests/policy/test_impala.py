import numpy as np
import pytest
import torch

from ding.policy import IMPALAPolicy, create_policy
from tests.helpers.unrolls import CueRecall, UnrollCollector, cue_recall_policy, train_on_cue_recall


def make_policy(lstm_hidden_size=None, **learn):
    return cue_recall_policy(IMPALAPolicy, lstm_hidden_size, **learn)


@pytest.mark.parametrize('lstm_hidden_size', [None, 8])
def test_actor_side_of_the_protocol(lstm_hidden_size):
    policy = make_policy(lstm_hidden_size)
    model = policy.actor_model()
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    weights = policy.actor_weights()
    assert all(w.device.type == 'cpu' for w in weights.values())
    model.load_state_dict(weights)
    state = policy.initial_actor_state(3)
    if lstm_hidden_size is None:
        assert state is None
    else:
        assert [s.shape for s in state] == [(3, 8), (3, 8)] and all(s.abs().sum() == 0 for s in state)
    obs = torch.randn(3, 2)
    action, logit, new_state = policy.actor_step(model, obs, state, torch.ones(3, dtype=torch.bool))
    assert action.shape == (3,) and action.dtype == torch.int64 and logit.shape == (3, 2)
    greedy, _, _ = policy.actor_step(model, obs, state, torch.ones(3, dtype=torch.bool), greedy=True)
    assert torch.equal(greedy, logit.argmax(-1))
    if lstm_hidden_size is not None:
        assert new_state[0].shape == (3, 8) and new_state[0].abs().sum() > 0


def test_actor_weights_are_a_copy_the_learner_keeps_training_past():
    policy = make_policy()
    weights = policy.actor_weights()
    batch = UnrollCollector(policy, CueRecall(4)).collect(6)
    info = policy.learn_mode.forward(batch)
    assert set(policy.learn_mode.monitor_vars()) <= set(info)
    assert all(isinstance(v, float) for v in info.values())
    after = policy.actor_weights()
    assert any(not torch.equal(weights[k], after[k]) for k in weights)
    # a copy made after training carries no gradients
    assert all(p.grad is None for p in policy.actor_model().parameters())


def test_the_lstm_model_learns_a_memory_task_the_feedforward_one_cannot():
    torch.manual_seed(0)
    assert train_on_cue_recall(make_policy(lstm_hidden_size=32), updates=100) > 0.9
    torch.manual_seed(0)
    assert train_on_cue_recall(make_policy(), updates=100) < 0.65


def test_learner_starts_the_lstm_from_the_unrolls_actor_state():
    torch.manual_seed(0)
    policy = make_policy(lstm_hidden_size=8)
    collector = UnrollCollector(policy, CueRecall(4, length=5))
    collector.collect(3)
    batch = collector.collect(3)  # starts mid-episode: a non-zero initial state
    assert batch['actor_state'][0].abs().sum() > 0
    # the learner's unroll from that state reproduces the logits the actor acted with
    logit, _, _ = policy._model.unroll(batch['obs'], batch['actor_state'], batch['first'])
    torch.testing.assert_close(logit[:-1], batch['logit'], atol=1e-5, rtol=1e-5)
    del batch['actor_state']
    with pytest.raises(KeyError, match='actor_state'):
        policy.learn_mode.forward(batch)


def test_bad_batches_and_configs_are_named():
    policy = make_policy()
    batch = UnrollCollector(policy, CueRecall(2)).collect(3)
    del batch['mask']
    with pytest.raises(KeyError, match="'mask'"):
        policy.learn_mode.forward(batch)
    with pytest.raises(TypeError, match='dict batch of unrolls'):
        policy.learn_mode.forward([batch])
    with pytest.raises(ValueError, match='optim_type'):
        make_policy(optim_type='sgd')
    with pytest.raises(ValueError, match='c_clip_ratio'):
        make_policy(c_clip_ratio=0.0)
    with pytest.raises(ValueError, match='lambda_'):
        make_policy(lambda_=1.5)


def test_rmsprop_and_checkpoint_round_trip():
    policy = make_policy(optim_type='rmsprop', grad_norm=None)
    assert isinstance(policy._optimizer, torch.optim.RMSprop)
    policy.learn_mode.forward(UnrollCollector(policy, CueRecall(2)).collect(3))
    state = policy.learn_mode.state_dict()
    fresh = make_policy(optim_type='rmsprop')
    fresh.learn_mode.load_state_dict(state)
    for k, v in policy.actor_weights().items():
        assert torch.equal(v, fresh.actor_weights()[k])


def test_eval_mode_keeps_each_envs_lstm_state_until_reset():
    policy = create_policy(
        dict(type='impala', model=dict(obs_shape=2, action_shape=2, lstm_hidden_size=8)), enable_field=['eval']
    )
    cue = {0: torch.tensor([1.0, 1.0]), 1: torch.tensor([-1.0, 1.0])}
    blank = torch.zeros(2)
    policy.eval_mode.forward(cue)
    out = policy.eval_mode.forward({0: blank, 1: blank})
    # same observation, different remembered cues: different logits
    assert not torch.allclose(out[0]['logit'], out[1]['logit'])
    policy.eval_mode.reset([0, 1])
    again = policy.eval_mode.forward({0: blank, 1: blank})
    torch.testing.assert_close(again[0]['logit'], again[1]['logit'])
    assert again[0]['action'] == again[0]['logit'].argmax()


def test_a_feedforward_model_offers_the_actors_a_numpy_chain_of_its_logits():
    policy = make_policy()
    model = policy.actor_model()
    obs = np.random.default_rng(0).normal(size=(5, 2)).astype(np.float32)
    chain = policy.numpy_actor(model, obs)
    assert chain is not None
    with torch.no_grad():
        expected, _ = model.act(torch.from_numpy(obs), None, torch.zeros(5, dtype=torch.bool))
    np.testing.assert_allclose(chain(obs), expected.numpy(), rtol=1e-5, atol=1e-6)
    # recurrent models and image frames act in torch
    assert make_policy(lstm_hidden_size=8).numpy_actor(make_policy(lstm_hidden_size=8).actor_model(), obs) is None
    assert policy.numpy_actor(model, obs.astype(np.uint8)) is None
