import pytest
import torch
import torch.nn as nn

from ding.model import DQN, VAC, ConvEncoder, DuelingHead, FCEncoder, ReparameterizationHead, create_model
from ding.utils.registry import MODEL_REGISTRY


def test_dueling_head_shape_and_decomposition():
    head = DuelingHead(16, 3, layer_num=1)
    x = torch.randn(5, 16)
    q = head(x)['logit']
    assert q.shape == (5, 3)
    # Q - mean_a(Q) equals the advantage stream centred, and mean_a(Q) equals V
    a = head.A(x)
    v = head.V(x)
    assert torch.allclose(q.mean(-1, keepdim=True), v, atol=1e-6)
    assert torch.allclose(q - v, a - a.mean(-1, keepdim=True), atol=1e-6)


@pytest.mark.parametrize('dueling', [True, False])
def test_dqn_outputs_one_q_per_action(dueling):
    model = DQN(obs_shape=4, action_shape=2, encoder_hidden_size_list=[32, 32, 16], dueling=dueling)
    out = model(torch.randn(7, 4))
    assert set(out) == {'logit'} and out['logit'].shape == (7, 2)


def test_dqn_accepts_list_shapes_and_a_wider_head():
    model = DQN(
        obs_shape=[4], action_shape=[3], encoder_hidden_size_list=[32, 16], head_hidden_size=64, head_layer_num=2
    )
    assert model(torch.randn(2, 4))['logit'].shape == (2, 3)


def test_dqn_image_observations_use_a_conv_encoder():
    model = DQN(obs_shape=[3, 32, 32], action_shape=4, encoder_hidden_size_list=[8, 16, 32])
    assert isinstance(model.encoder, ConvEncoder)
    assert model(torch.randn(2, 3, 32, 32))['logit'].shape == (2, 4)


@pytest.mark.parametrize('model_cls', [DQN, VAC])
def test_atari_frames_pick_the_nature_cnn_and_uint8_frames_are_scaled(model_cls):
    model = model_cls(obs_shape=[4, 84, 84], action_shape=6, encoder_hidden_size_list=None)
    encoder = model.encoder
    assert isinstance(encoder, ConvEncoder) and encoder.output_size == 512
    convs = [m for m in encoder.main if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [(32, 8, 4), (64, 4, 2), (64, 3, 1)]
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    assert torch.allclose(encoder(frames), encoder(frames.float() / 255.0), atol=1e-6)


def test_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match='hiden_size'):
        create_model(dict(type='dqn', obs_shape=4, action_shape=2, hiden_size=3))


def test_create_model_uses_the_registry_and_keeps_the_config():
    cfg = dict(type='vac', import_names=['ding.model.template.vac'], obs_shape=4, action_shape=2)
    model = create_model(cfg)
    assert isinstance(model, VAC) and cfg['type'] == 'vac'
    assert MODEL_REGISTRY.get_cls('dqn') is DQN
    with pytest.raises(KeyError, match="'type'"):
        create_model(dict(obs_shape=4))


def test_vac_discrete_modes():
    model = VAC(4, 2, encoder_hidden_size_list=[64, 64, 128], actor_head_hidden_size=128, critic_head_hidden_size=128)
    x = torch.randn(3, 4)
    assert model(x, 'compute_actor')['logit'].shape == (3, 2)
    assert model(x, 'compute_critic')['value'].shape == (3,)
    both = model(x, 'compute_actor_critic')
    assert both['logit'].shape == (3, 2) and both['value'].shape == (3,)
    assert torch.allclose(both['value'], model(x, 'compute_critic')['value'])
    with pytest.raises(ValueError, match='compute_actor'):
        model(x, 'compute_q')


def test_vac_head_width_may_differ_from_encoder_output():
    model = VAC(
        4,
        2,
        encoder_hidden_size_list=[32, 16],
        actor_head_hidden_size=64,
        critic_head_hidden_size=8,
        share_encoder=False,
    )
    out = model(torch.randn(2, 4), 'compute_actor_critic')
    assert out['logit'].shape == (2, 2) and out['value'].shape == (2,)


@pytest.mark.parametrize('sigma_type', ['independent', 'conditioned', 'fixed'])
def test_vac_continuous_gaussian_head(sigma_type):
    model = VAC(
        3,
        2,
        action_space='continuous',
        encoder_hidden_size_list=[64, 64],
        actor_head_layer_num=0,
        critic_head_layer_num=0,
        sigma_type=sigma_type,
        bound_type='tanh',
        fixed_sigma_value=0.3,
    )
    out = model(torch.randn(5, 3) * 100, 'compute_actor_critic')
    mu, sigma = out['logit']['mu'], out['logit']['sigma']
    assert mu.shape == sigma.shape == (5, 2)
    assert torch.all(mu.abs() <= 1) and torch.all(sigma > 0)
    if sigma_type == 'fixed':
        assert torch.allclose(sigma, torch.full_like(sigma, 0.3))


def test_reparameterization_head_rejects_unknown_sigma_type():
    with pytest.raises(ValueError, match='sigma_type'):
        ReparameterizationHead(8, 1, sigma_type='learned')


def test_fc_encoder_layers_and_activation_by_name():
    enc = FCEncoder(4, [8, 8, 2], activation='tanh')
    assert enc(torch.randn(3, 4)).shape == (3, 2)
    assert sum(isinstance(m, nn.Tanh) for m in enc.modules()) == 3
    res = FCEncoder(4, [8, 8], res_block=True)
    assert res(torch.randn(1, 4)).shape == (1, 8)


def test_shared_encoder_appears_once_in_the_state_dict():
    model = VAC(4, 2)
    keys = list(model.state_dict())
    assert sum(k.startswith('encoder.') for k in keys) == 6 and not any(
        k.startswith(('actor.', 'critic.')) for k in keys
    )
    assert model.actor[0] is model.encoder and model.critic[1] is model.critic_head
