import copy

import numpy as np
import pytest
import torch

from ding.model import DQN, VAC
from ding.policy import ESPolicy
from ding.policy.es import greedy_action, write_flat_parameters
from ding.torch_utils.numpy_chain import NumpyChain
from ding.worker.es.noise import MAX_NOISE_TABLE_SIZE
from ding.worker.es.rollout import ESRollout, GreedyActor

CARTPOLE_ENV = {'type': 'cartpole', 'import_names': ['dizoo.classic_control.cartpole.envs.cartpole_env']}
CARTPOLE_MODEL = dict(
    obs_shape=4, action_shape=2, encoder_hidden_size_list=[16], actor_head_layer_num=0, critic_head_layer_num=0
)


def cartpole_policy(**learn):
    torch.manual_seed(0)
    cfg = dict(model=CARTPOLE_MODEL, noise_table=dict(seed=0, size=200_000), collect=dict(env=CARTPOLE_ENV))
    return ESPolicy({**cfg, 'learn': {'population_size': 10, 'sigma': 0.1, 'learning_rate': 0.1, **learn}})


@pytest.fixture(scope='module')
def spec():
    return cartpole_policy().worker_spec()


def test_an_in_process_loop_of_rollouts_and_updates_learns_cartpole():
    policy = cartpole_policy()
    rollout = ESRollout.from_spec(policy.worker_spec(), seed=1)
    scores = []
    for _ in range(12):
        rollout.set_parameters(policy.flat_parameters(), policy.version)
        scores.append(np.mean([rollout.evaluate_unperturbed()[0] for _ in range(5)]))
        if scores[-1] >= 150:
            break
        partials = []
        for _ in range(policy.population_size):
            noise_id = rollout.next_noise_id()
            partials.append(policy.make_partial(noise_id, *rollout.evaluate(noise_id)[:2], rollout.version))
        policy.update(partials)
    assert scores[0] < 30 and max(scores) >= 150, scores  # from falling at once to (nearly) balancing 200 steps


def test_a_pair_plays_plus_and_minus_the_perturbation_from_one_start(spec):
    policy = cartpole_policy()
    rollout = ESRollout.from_spec(spec, seed=0)
    with pytest.raises(RuntimeError, match='set_parameters first'):
        rollout.evaluate(0)
    rollout.set_parameters(policy.flat_parameters(), 3)
    assert (rollout.dim, rollout.version) == (policy.dim, 3)
    noise_id = rollout.next_noise_id()
    return_pos, return_neg, steps = rollout.evaluate(noise_id)
    assert return_pos + return_neg == steps  # CartPole pays 1 per step
    # the same seed draws the same noise ids and episode starts
    twin = ESRollout.from_spec(spec, seed=0)
    twin.set_parameters(policy.flat_parameters(), 3)
    assert twin.next_noise_id() == noise_id and twin.evaluate(noise_id) == (return_pos, return_neg, steps)
    # with a vanishing perturbation both halves replay the same episode (common random numbers)
    tiny = ESRollout.from_spec({**spec, 'sigma': 1e-9}, seed=5)
    tiny.set_parameters(policy.flat_parameters(), 3)
    for _ in range(3):
        pos, neg, _ = tiny.evaluate(tiny.next_noise_id())
        assert pos == neg


def test_without_antithetic_sampling_one_episode_is_played(spec):
    rollout = ESRollout.from_spec({**spec, 'antithetic': False, 'max_episode_steps': 4}, seed=0)
    rollout.set_parameters(cartpole_policy().flat_parameters(), 0)
    return_pos, return_neg, steps = rollout.evaluate(rollout.next_noise_id())
    assert return_neg == 0.0 and return_pos == steps <= 4


def test_a_gymnasium_id_and_a_continuous_ding_env_are_played():
    gym_spec = cartpole_policy().worker_spec()
    gym_spec['env'] = {'env_id': 'CartPole-v1'}
    rollout = ESRollout.from_spec(gym_spec, seed=0)
    rollout.set_parameters(np.zeros(rollout.dim, np.float32), 0)
    assert rollout.evaluate_unperturbed()[1] >= 8  # an all-zero net always pushes left: a short episode
    model = dict(obs_shape=3, action_shape=1, action_space='continuous', encoder_hidden_size_list=[8])
    pendulum = {'type': 'pendulum', 'import_names': ['dizoo.classic_control.pendulum.envs.pendulum_env']}
    policy = ESPolicy(dict(model=model, noise_table=dict(seed=0, size=10_000), collect=dict(env=pendulum)))
    rollout = ESRollout.from_spec(policy.worker_spec(), seed=0)
    rollout.set_parameters(policy.flat_parameters(), 0)
    return_pos, return_neg, steps = rollout.evaluate(rollout.next_noise_id())
    assert steps == 400 and return_pos < 0 and return_neg < 0


def _with(spec, path, value):
    changed = copy.deepcopy(spec)
    *parents, last = path
    node = changed
    for key in parents:
        node = node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return changed


@pytest.mark.parametrize(
    'path, value, message',
    [
        (('sigma',), KeyError, r"missing keys \['sigma'\]"),
        (('extra',), 1, r"unknown keys \['extra'\]"),
        (('spec_version',), 2, 'spec_version'),
        (('sigma',), -0.1, 'spec.sigma'),
        (('antithetic',), 'yes', 'spec.antithetic'),
        (('max_episode_steps',), 0, 'spec.max_episode_steps'),
        (('dim',), 99, 'the model built from spec.model has'),
        (('noise_table', 'size'), MAX_NOISE_TABLE_SIZE * 2, 'noise_table.size'),
        (('noise_table', 'size'), 100, 'do not fit a noise table of 100'),
        (('env',), {'env_id': 'os:system'}, "without ':'"),
        (('env',), {'env_id': 'NoSuchEnv-v0'}, 'not a registered gymnasium id'),
        (('env',), {'env_id': 'CartPole-v1', 'entry_point': 'x'}, "unknown keys \\['entry_point'\\]"),
        (('env', 'import_names'), ['os'], 'ding.\\* / dizoo.\\* module names'),
        (('env', 'type'), 'no_such_env', "unknown type 'no_such_env'"),
        (('env', 'nested'), {'a': 1}, 'env.nested'),
        (('model', 'kwargs', 'obs_shape'), float('nan'), 'expected finite numbers'),
        (('model', 'kwargs', 'not_an_argument'), 1, 'the model refused them'),
        (('model', 'import_names'), ['subprocess'], 'module names'),
    ],
)
def test_every_spec_field_is_checked_with_a_clear_error(spec, path, value, message):
    with pytest.raises(ValueError, match=message):
        ESRollout.from_spec(_with(spec, path, value), seed=0)


def test_parameters_from_the_learner_are_checked(spec):
    rollout = ESRollout.from_spec(spec, seed=0)
    with pytest.raises(ValueError, match=f'expected {rollout.dim} values'):
        rollout.set_parameters(np.zeros(rollout.dim + 1, np.float32), 0)
    bad = np.zeros(rollout.dim, np.float32)
    bad[3] = np.nan
    with pytest.raises(ValueError, match='NaN or infinity'):
        rollout.set_parameters(bad, 0)
    with pytest.raises(ValueError, match='version'):
        rollout.set_parameters(np.zeros(rollout.dim, np.float32), -1)


@pytest.mark.parametrize(
    'model, numpy_path',
    [
        (VAC(4, 2, encoder_hidden_size_list=[8, 8], actor_head_layer_num=1), True),
        (VAC(3, 2, action_space='continuous', bound_type='tanh', encoder_hidden_size_list=[8]), True),
        (DQN(4, 2, encoder_hidden_size_list=[8], dueling=True), False),  # mean and sum of two heads: not a chain
    ],
)
def test_small_actors_act_in_numpy_and_follow_parameter_writes(model, numpy_path):
    model.requires_grad_(False)
    actor = NumpyChain.trace(GreedyActor(model), torch.randn(8, model.obs_shape))
    assert (actor is not None) == numpy_path
    if actor is None:
        return
    write_flat_parameters(model, torch.randn(sum(p.numel() for p in model.parameters())))  # after the build
    observations = torch.randn(16, model.obs_shape)
    expected = greedy_action(model, observations).numpy()
    for obs, action in zip(observations.numpy(), expected):
        np.testing.assert_allclose(actor(obs), action, rtol=1e-4, atol=1e-5)
