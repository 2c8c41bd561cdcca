import json
import os
import threading

import numpy as np
import pytest
import torch

from ding.config import compile_config, read_config
from ding.policy import ESPartial, ESPolicy, create_policy
from ding.utils.checkpoint import load_checkpoint, save_checkpoint
from ding.worker.es.rollout import ESRollout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CARTPOLE_ENV = {'type': 'cartpole', 'import_names': ['dizoo.classic_control.cartpole.envs.cartpole_env']}


def make_policy(action_space='discrete', noise_seed=0, **learn):
    """A 31-parameter actor (3 observations, 2 actions, 4 hidden units) and a small noise table."""
    model = dict(
        obs_shape=3, action_shape=2, action_space=action_space, encoder_hidden_size_list=[4],
        actor_head_layer_num=0, critic_head_layer_num=0,
    )  # fmt: skip
    if action_space == 'continuous':
        model.update(bound_type='tanh', sigma_type='fixed')
    torch.manual_seed(0)
    cfg = dict(model=model, noise_table=dict(seed=noise_seed, size=10_000), collect=dict(env=CARTPOLE_ENV))
    return ESPolicy({**cfg, 'learn': {'population_size': 4, **learn}})


def reference_theta(theta, batches, noise, dim, sigma, lr, weight_decay, antithetic, rank_shaping):
    """OpenAI-ES with Adam, written out in float64 from the paper's formulas: the expected parameters."""
    beta1, beta2, adam_eps = 0.9, 0.999, 1e-8
    theta = theta.astype(np.float64)
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for t, batch in enumerate(batches, start=1):
        returns = [r for _, r_pos, r_neg in batch for r in ((r_pos, r_neg) if antithetic else (r_pos,))]
        if rank_shaping:
            # rank = (number of smaller returns + half the other equal ones) / (N - 1) - 0.5
            shaped = [
                (sum(o < r for o in returns) + (sum(o == r for o in returns) - 1) / 2) / (len(returns) - 1) - 0.5
                for r in returns
            ]
        else:
            shaped = [r - np.mean(returns) for r in returns]
        gradient = np.zeros_like(theta)
        for i, (noise_id, _, _) in enumerate(batch):
            weight = shaped[2 * i] - shaped[2 * i + 1] if antithetic else shaped[i]
            gradient += weight * noise[noise_id : noise_id + dim]
        gradient /= len(returns) * sigma
        descent = -gradient + weight_decay * theta  # ascend the return, decay toward 0
        m = beta1 * m + (1 - beta1) * descent
        v = beta2 * v + (1 - beta2) * descent**2
        theta = theta - lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + adam_eps)
    return theta


BATCHES = [
    [(5, 10.0, 3.0), (900, 3.0, 3.0), (77, -2.0, 8.0), (4000, 15.0, 1.0)],
    [(12, 1.0, 2.0), (3, 200.0, 200.0), (9000, 4.0, -4.0), (640, 0.5, 7.0)],
]


@pytest.mark.parametrize('antithetic', [True, False])
@pytest.mark.parametrize('rank_shaping', [True, False])
def test_two_updates_match_the_reference_computation(antithetic, rank_shaping):
    learn = dict(sigma=0.1, learning_rate=0.02, weight_decay=0.01, antithetic=antithetic, rank_shaping=rank_shaping)
    policy = make_policy(**learn)
    theta0 = policy.flat_parameters()
    for batch in BATCHES:
        version = policy.version
        info = policy.update([policy.make_partial(i, pos, neg, version) for i, pos, neg in batch])
        assert info['used_partials'] == 4 and info['version'] == version + 1
    expected = reference_theta(
        theta0, BATCHES, policy.noise_table.noise, policy.dim, learn['sigma'], learn['learning_rate'],
        learn['weight_decay'], antithetic, rank_shaping,
    )  # fmt: skip
    np.testing.assert_allclose(policy.flat_parameters(), expected, rtol=1e-4, atol=1e-6)
    assert policy.version == 2
    # the model the eval mode acts with holds the same parameters
    model_params = torch.nn.utils.parameters_to_vector(policy._model.parameters()).numpy()
    np.testing.assert_array_equal(model_params, policy.flat_parameters())


def test_weight_decay_alone_pulls_parameters_toward_zero():
    policy = make_policy(weight_decay=0.5, learning_rate=0.01)
    theta0 = policy.flat_parameters()
    version = policy.version
    policy.update([policy.make_partial(i, 1.0, 1.0, version) for i in range(4)])  # all tied: no ES direction
    np.testing.assert_allclose(policy.flat_parameters(), theta0 - 0.01 * np.sign(theta0), atol=1e-6)


def test_the_staleness_rule_keeps_recent_results_and_drops_old_ones():
    policy = make_policy(max_partial_lag=1)
    for _ in range(3):
        policy.update([policy.make_partial(i, float(i), 0.0, policy.version) for i in range(4)])
    assert policy.version == 3
    assert policy.make_partial(7, 1.0, 2.0, 3) == ESPartial(7, 1.0, 2.0, 3)
    assert policy.make_partial(7, 1.0, 2.0, 2) == ESPartial(7, 1.0, 2.0, 2)  # lag 1: used around the current model
    assert policy.make_partial(7, 1.0, 2.0, 1) is None  # lag 2: dropped
    # a partial accepted at lag 1 that waited through one more update is dropped by the update
    waiting = policy.make_partial(7, 1.0, 2.0, 2)
    policy.update([policy.make_partial(i, float(i), 0.0, 3) for i in range(4)])
    info = policy.update([waiting, policy.make_partial(8, 5.0, 1.0, 4)])
    assert (info['stale_partials'], info['used_partials'], policy.version) == (1, 1, 5)
    info = policy.update([waiting])
    assert (info['stale_partials'], info['used_partials'], policy.version) == (1, 0, 5)  # nothing left: no step


@pytest.mark.parametrize(
    'args, message',
    [
        ((10_000, 1.0, 1.0, 0), 'noise_id 10000 outside'),
        ((-1, 1.0, 1.0, 0), 'noise_id -1 outside'),
        ((1.5, 1.0, 1.0, 0), 'noise_id must be an int'),
        ((0, float('nan'), 1.0, 0), 'returns must be finite'),
        ((0, 1.0, 1.0, 1), r'model_version 1 outside \[0, 0\]'),
        ((0, 1.0, 1.0, -1), r'model_version -1 outside'),
    ],
)
def test_results_no_honest_worker_sends_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        make_policy().make_partial(*args)


@pytest.mark.parametrize(
    'learn, key',
    [
        ({'sigma': 0.0}, 'sigma'),
        ({'population_size': 0}, 'population_size'),
        ({'max_partial_lag': -1}, 'max_partial_lag'),
        ({'weight_decay': -0.1}, 'weight_decay'),
    ],
)
def test_bad_config_values_are_named(learn, key):
    with pytest.raises(ValueError, match=f'policy.learn.{key}'):
        make_policy(**learn)


def test_a_model_larger_than_the_noise_table_is_refused():
    with pytest.raises(ValueError, match='does not fit a table of 10'):
        ESPolicy(dict(model=dict(obs_shape=3, action_shape=2), noise_table=dict(seed=0, size=10)))


def test_reads_during_a_background_update_see_parameters_and_version_of_one_update():
    policy = make_policy()
    after_update = {0: policy.flat_parameters()}
    reads = []

    def updates():
        for k in range(30):
            policy.update([policy.make_partial(i * 50 + k, float(i), float(-i), policy.version) for i in range(4)])
            after_update[policy.version] = policy.flat_parameters()  # only this thread updates

    updater = threading.Thread(target=updates)
    updater.start()
    try:
        while updater.is_alive():
            reads.append(policy.flat_parameters_with_version())
            version = policy.version
            partial = policy.make_partial(3, 1.0, 0.0, version)  # None only if 3 updates ran since reading version
            assert partial is None or partial.model_version == version
    finally:
        updater.join()
    assert policy.version == 30 and len(reads) > 1
    for params, version in reads:
        np.testing.assert_array_equal(params, after_update[version])


def test_eval_mode_acts_greedily_with_the_unperturbed_model():
    policy = make_policy()
    obs = {3: np.array([0.1, -0.2, 0.3], np.float32), 5: np.array([1.0, 0.0, -1.0], np.float32)}
    out = policy.eval_mode.forward(obs)
    logits = policy._model(torch.from_numpy(np.stack(list(obs.values()))), 'compute_actor')['logit']
    assert [out[3]['action'].item(), out[5]['action'].item()] == logits.argmax(-1).tolist()
    continuous = make_policy(action_space='continuous').eval_mode.forward(obs)
    assert continuous[3]['action'].shape == (2,) and continuous[3]['action'].abs().max() < 1.0  # tanh-bounded mean


def test_checkpoint_round_trip_restores_parameters_adam_state_and_version(tmp_path):
    policy = make_policy()
    for batch in BATCHES:
        policy.update([policy.make_partial(i, pos, neg, policy.version) for i, pos, neg in batch])
    path = save_checkpoint(tmp_path / 'es', {'policy': policy.learn_mode.state_dict()})
    restored = make_policy(noise_seed=0)
    restored.load_state_dict(load_checkpoint(path)['policy'])
    assert restored.version == 2
    np.testing.assert_array_equal(restored.flat_parameters(), policy.flat_parameters())
    batch = [(1, 3.0, 1.0), (2, 0.0, 4.0), (3, 2.0, 2.0), (4, 9.0, 1.0)]
    for p in (policy, restored):  # the same next step: the Adam moments came back too
        p.update([p.make_partial(i, pos, neg, 2) for i, pos, neg in batch])
    np.testing.assert_array_equal(restored.flat_parameters(), policy.flat_parameters())


def test_worker_spec_is_json_and_names_a_missing_env():
    policy = create_policy({**make_policy()._cfg, 'type': 'es'}, enable_field=['learn', 'eval'])
    spec = policy.worker_spec()
    assert json.loads(json.dumps(spec)) == spec
    assert spec['dim'] == 31 and spec['noise_table'] == {'seed': 0, 'size': 10_000} and spec['antithetic'] is True
    assert spec['model']['type'] == 'vac' and spec['model']['kwargs']['encoder_hidden_size_list'] == [4]
    bare = ESPolicy(dict(model=dict(obs_shape=3, action_shape=2), noise_table=dict(seed=0, size=100_000)))
    with pytest.raises(ValueError, match='policy.collect.env'):
        bare.worker_spec()
    given = ESPolicy(dict(noise_table=dict(seed=0, size=100_000)), model=torch.nn.Linear(3, 2))
    with pytest.raises(ValueError, match='describe it in policy.model'):
        given.worker_spec()


@pytest.mark.parametrize(
    'path',
    [
        'dizoo/classic_control/cartpole/config/cartpole_es_config.py',
        'dizoo/classic_control/pendulum/config/pendulum_es_config.py',
    ],
)
def test_the_dizoo_es_configs_compile_to_a_policy_whose_spec_builds_a_rollout(path):
    main, create, _ = read_config(os.path.join(ROOT, path))
    cfg = compile_config(main, seed=0, auto=True, create_cfg=create, save_cfg=False)
    policy = create_policy(cfg.policy, enable_field=['learn', 'eval'])
    rollout = ESRollout.from_spec(policy.worker_spec(), seed=0)
    assert rollout.dim == policy.dim
