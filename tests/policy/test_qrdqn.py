"""QR-DQN: config keys, the learn step's loss is the quantile Huber loss on the model's own outputs,
DQN's acting. (The config solving CartPole is measured in benchmarks/NOTES.md; the C51 run in test_c51 shows the
distributional DQN path learning through the serial pipeline.)"""

import copy

import pytest
import torch

from ding.policy import QRDQNPolicy, create_policy
from ding.rl_utils import qrdqn_nstep_td_data, qrdqn_nstep_td_error
from ding.utils.collate import default_collate
from tests.policy.test_dqn import fixed_batch

MODEL = dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[32, 32, 16], num_quantiles=8)


def make_policy(learn=None, **cfg):
    return QRDQNPolicy(dict(model=dict(MODEL), learn=dict(batch_size=32, **(learn or {})), **cfg))


def test_default_config_follows_di_engine_keys():
    cfg = QRDQNPolicy.default_config()
    assert cfg.model == dict(num_quantiles=32) and cfg.learn.kappa == 1.0 and cfg.other.eps.type == 'exp'
    assert make_policy().default_model() == ('qrdqn', ['ding.model.template.distributional_q'])


def test_learn_loss_is_the_quantile_huber_loss_with_a_double_dqn_next_action():
    torch.manual_seed(0)
    policy = make_policy(learn=dict(kappa=0.5), discount_factor=0.9, priority=True)
    online, target = copy.deepcopy(policy._model), copy.deepcopy(policy._target_model)
    data = fixed_batch()
    info = policy.learn_mode.forward(data)
    b = default_collate(data)
    with torch.no_grad():
        next_action = online(b['next_obs'])['logit'].argmax(-1)  # the online net picks, the target net scores
        out = online(b['obs'])
        td = qrdqn_nstep_td_data(
            out['q'], target(b['next_obs'])['q'], b['action'], next_action, b['reward'], b['done'], out['tau'], None
        )
        loss, per_sample = qrdqn_nstep_td_error(td, 0.9, kappa=0.5)
    assert info['total_loss'] == pytest.approx(float(loss), rel=1e-5)
    assert info['priority'] == pytest.approx(per_sample.tolist(), rel=1e-5)


def test_collect_and_eval_act_on_the_expected_q():
    torch.manual_seed(0)
    policy = create_policy(dict(type='qrdqn', model=dict(MODEL)), enable_field=['collect', 'eval'])
    obs = {0: torch.randn(4), 3: torch.randn(4)}
    out = policy.eval_mode.forward(obs)
    q = policy._model(torch.stack(list(obs.values())))['logit']
    assert [int(out[k]['action']) for k in (0, 3)] == q.argmax(-1).tolist()
    assert set(policy.collect_mode.forward(obs, eps=1.0)) == {0, 3}
