import pytest
import torch

from ding.model import IMPALAVAC, ConvEncoder, FCEncoder, create_model


@pytest.mark.parametrize('share_encoder', [True, False])
def test_unroll_equals_step_by_step_acting_with_resets(share_encoder):
    torch.manual_seed(0)
    model = IMPALAVAC(obs_shape=3, action_shape=4, lstm_hidden_size=16, share_encoder=share_encoder)
    T, B = 6, 3
    obs = torch.randn(T, B, 3)
    first = torch.zeros(T, B, dtype=torch.bool)
    first[0] = True
    first[3, 1] = True  # env 1 starts a new episode mid-unroll
    start = model.initial_state(B)
    assert start[0].shape == (B, 16 if share_encoder else 32)
    logit, value, final = model.unroll(obs, start, first)
    assert logit.shape == (T, B, 4) and value.shape == (T, B)
    state = acting_state = start
    for t in range(T):
        step_logit, step_value, state = model.step(obs[t], state, first[t])
        torch.testing.assert_close(logit[t], step_logit)
        torch.testing.assert_close(value[t], step_value)
        act_logit, acting_state = model.act(obs[t], acting_state, first[t])  # what actors call: no critic head
        torch.testing.assert_close(act_logit, step_logit)
        torch.testing.assert_close(acting_state[0], state[0])
    torch.testing.assert_close(final[0], state[0])
    torch.testing.assert_close(final[1], state[1])


def test_first_resets_the_state_to_its_initial_value():
    model = IMPALAVAC(obs_shape=2, action_shape=2, lstm_hidden_size=4)
    obs = torch.randn(1, 2)
    fresh, _, _ = model.step(obs, model.initial_state(1), torch.tensor([True]))
    used = (torch.ones(1, 4), torch.ones(1, 4))
    reset, _, _ = model.step(obs, used, torch.tensor([True]))
    carried, _, _ = model.step(obs, used, torch.tensor([False]))
    torch.testing.assert_close(fresh, reset)
    assert not torch.allclose(fresh, carried)


def test_feedforward_model_has_no_state_and_vac_modes():
    torch.manual_seed(0)
    acting = IMPALAVAC(obs_shape=3, action_shape=2)
    obs = torch.randn(5, 3)
    logit, state = acting.act(obs, None, torch.zeros(5, dtype=torch.bool))
    assert state is None
    torch.testing.assert_close(logit, acting(obs, 'compute_actor')['logit'])
    model = create_model(dict(type='impala_vac', obs_shape=4, action_shape=2))
    assert isinstance(model.encoder, FCEncoder) and model.initial_state(5) is None and not model.recurrent
    out = model(torch.randn(5, 4), 'compute_actor_critic')
    assert out['logit'].shape == (5, 2) and out['value'].shape == (5,)
    logit, value, state = model.unroll(torch.randn(3, 5, 4), None, torch.zeros(3, 5, dtype=torch.bool))
    assert logit.shape == (3, 5, 2) and value.shape == (3, 5) and state is None


def test_atari_frames_use_the_nature_cnn_and_are_scaled_inside():
    model = IMPALAVAC(obs_shape=[4, 84, 84], action_shape=6, lstm_hidden_size=32)
    assert isinstance(model.encoder, ConvEncoder) and model.encoder.output_size == 512
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    state, first = model.initial_state(2), torch.ones(2, dtype=torch.bool)
    from_uint8, _, _ = model.step(frames, state, first)
    from_float, _, _ = model.step(frames.float() / 255.0, state, first)
    torch.testing.assert_close(from_uint8, from_float)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='lstm_hidden_size'):
        IMPALAVAC(obs_shape=4, action_shape=2, lstm_hidden_size=-1)
    with pytest.raises(ValueError, match='action_shape'):
        IMPALAVAC(obs_shape=4, action_shape=[2, 3])
    recurrent = IMPALAVAC(obs_shape=4, action_shape=2, lstm_hidden_size=4)
    with pytest.raises(ValueError, match='step\\(\\) / unroll\\(\\)'):
        recurrent(torch.randn(1, 4), 'compute_actor')
    with pytest.raises(ValueError, match='needs a state'):
        recurrent.step(torch.randn(1, 4), None, torch.ones(1, dtype=torch.bool))
