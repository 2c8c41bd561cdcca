"""Data-parallel policies: two rank processes, each training on half of a batch, end with the same parameters
as one process training on the whole batch (DQN and PPO), and start from rank 0's weights."""

import pytest
import torch

from ding.policy import DQNPolicy, PPOPolicy
from ding.utils.pytorch_ddp_dist_helper import DDPContext
from tests.helpers.dist_ranks import run_ranks, write_result

STEPS = 3
JOINT = 16  # samples in the joint batch; each of the 2 ranks trains on half
DQN_CFG = dict(
    type='dqn',
    model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[16, 16]),
    learn=dict(batch_size=JOINT, learning_rate=0.01, target_update_freq=2),
)
# Per-batch statistics (advantage / value normalisation, recomputed GAE) would differ between a half and the
# whole batch; with them off, the two set-ups compute the same loss.
PPO_CFG = dict(
    type='ppo',
    recompute_adv=False,
    model=dict(
        obs_shape=4,
        action_shape=2,
        encoder_hidden_size_list=[16],
        actor_head_hidden_size=16,
        critic_head_hidden_size=16,
    ),  # fmt: skip
    learn=dict(epoch_per_collect=2, batch_size=JOINT, learning_rate=0.01, adv_norm=False, value_norm=False),
)


def dqn_batch() -> list[dict]:
    g = torch.Generator().manual_seed(1)
    return [
        {
            'obs': torch.randn(4, generator=g),
            'next_obs': torch.randn(4, generator=g),
            'action': torch.randint(0, 2, (), generator=g),
            'reward': torch.rand((), generator=g),
            'done': i % 5 == 0,
        }
        for i in range(JOINT)
    ]


def ppo_batch() -> list[dict]:
    g = torch.Generator().manual_seed(2)
    return [
        {
            'obs': torch.randn(4, generator=g),
            'action': torch.randint(0, 2, (), generator=g),
            'logit': torch.randn(2, generator=g),
            'value': torch.randn((), generator=g),
            'adv': torch.randn((), generator=g),
        }
        for _ in range(JOINT)
    ]


def with_learn(cfg: dict, **learn) -> dict:
    return {**cfg, 'learn': {**cfg['learn'], **learn}}


def train(policy_cls, cfg: dict, data: list[dict], seed: int) -> list[list[float]]:
    """Parameters after ``STEPS`` learn calls on ``data``, the model built under ``seed``."""
    torch.manual_seed(seed)
    policy = policy_cls(cfg)
    for _ in range(STEPS):
        policy.learn_mode.forward(data)
    return [p.detach().reshape(-1).tolist() for p in policy._model.parameters()]


def _rank_main(rank: int, port: int, out_dir: str) -> None:
    half = slice(rank * JOINT // 2, (rank + 1) * JOINT // 2)
    with DDPContext(init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2, timeout=30):
        # Each rank builds its model under its own seed: the policy broadcasts rank 0's weights.
        result = {
            'dqn': train(DQNPolicy, with_learn(DQN_CFG, batch_size=JOINT // 2), dqn_batch()[half], seed=rank),
            'ppo': train(PPOPolicy, with_learn(PPO_CFG, batch_size=JOINT // 2), ppo_batch()[half], seed=rank),
        }
    write_result(out_dir, rank, result)


@pytest.fixture(scope='module')
def ranks(tmp_path_factory):
    return run_ranks(_rank_main, str(tmp_path_factory.mktemp('data_parallel')))


def max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for pa, pb in zip(a, b) for x, y in zip(pa, pb))


@pytest.mark.parametrize(
    'algo, policy_cls, cfg, batch', [('dqn', DQNPolicy, DQN_CFG, dqn_batch), ('ppo', PPOPolicy, PPO_CFG, ppo_batch)]
)
def test_two_ranks_on_halves_equal_one_process_on_the_joint_batch(ranks, algo, policy_cls, cfg, batch):
    assert ranks[0][algo] == ranks[1][algo]  # identical on every rank, bit for bit
    single = train(policy_cls, cfg, batch(), seed=0)
    assert max_diff(ranks[0][algo], single) <= 1e-6
    untrained = train(policy_cls, with_learn(cfg, learning_rate=0.0), batch(), seed=0)
    assert max_diff(untrained, single) > 1e-3  # the comparison above is not vacuous
