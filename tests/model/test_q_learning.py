"""DRQN, the recurrent Q network of R2D2: shapes, the state API, an unroll equals stepping."""

import pytest
import torch

from ding.model import DRQN, create_model


def test_shapes_and_initial_state():
    model = DRQN(obs_shape=3, action_shape=4, encoder_hidden_size_list=[16, 8])
    assert model.lstm_hidden_size == 8  # the encoder's width, as in DI-engine
    h, c = model.initial_state(5)
    assert h.shape == c.shape == (5, 8) and not h.any()
    step = model({'obs': torch.randn(5, 3), 'prev_state': None}, inference=True)
    assert step['logit'].shape == (5, 4) and step['next_state'][0].shape == (5, 8)
    unroll = model({'obs': torch.randn(7, 5, 3)})
    assert unroll['logit'].shape == (7, 5, 4) and unroll['next_state'][1].shape == (5, 8)
    assert isinstance(create_model(dict(type='drqn', obs_shape=3, action_shape=4)), DRQN)


@pytest.mark.parametrize('dueling', [True, False])
def test_unroll_equals_step_by_step_and_carries_the_state(dueling):
    torch.manual_seed(0)
    model = DRQN(obs_shape=3, action_shape=2, encoder_hidden_size_list=[16], head_hidden_size=12, dueling=dueling)
    obs = torch.randn(6, 4, 3)
    start = (torch.randn(4, 12), torch.randn(4, 12))
    whole = model({'obs': obs, 'prev_state': start})
    state = start
    for t in range(6):
        out = model({'obs': obs[t], 'prev_state': state}, inference=True)
        torch.testing.assert_close(whole['logit'][t], out['logit'])
        state = out['next_state']
    torch.testing.assert_close(whole['next_state'][0], state[0])
    torch.testing.assert_close(whole['next_state'][1], state[1])
    # two halves carried through the state equal the whole unroll
    first = model({'obs': obs[:2], 'prev_state': start})
    second = model({'obs': obs[2:], 'prev_state': first['next_state']})
    torch.testing.assert_close(torch.cat([first['logit'], second['logit']]), whole['logit'])
    # the state matters: another start changes the first Q values
    other = model({'obs': obs, 'prev_state': model.initial_state(4)})
    assert not torch.allclose(other['logit'][0], whole['logit'][0])


def test_refuses_continuous_actions():
    with pytest.raises(ValueError, match='action_shape'):
        DRQN(obs_shape=3, action_shape=[2, 2])
