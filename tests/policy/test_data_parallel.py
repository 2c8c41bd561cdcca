"""Data-parallel policies: two rank processes, each training on half of a batch, end with the same parameters
as one process training on the whole batch (DQN, PPO, A2C, IMPALA, APPO), and start from rank 0's weights."""

from collections.abc import Callable
from typing import Any

import pytest
import torch

from ding.policy import A2CPolicy, APPOPolicy, DQNPolicy, IMPALAPolicy, PPOPolicy
from ding.utils.pytorch_ddp_dist_helper import DDPContext
from tests.helpers.dist_ranks import run_ranks, write_result
from tests.helpers.unrolls import CueRecall, UnrollCollector, cue_recall_policy

STEPS = 3
JOINT = 16  # samples (DQN, PPO) or env columns of an unroll (IMPALA, APPO) in the joint batch
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
A2C_CFG = dict(type='a2c', model=PPO_CFG['model'], learn=dict(batch_size=JOINT, learning_rate=0.01, adv_norm=False))


def with_learn(cfg: dict, **learn) -> dict:
    return {**cfg, 'learn': {**cfg['learn'], **learn}}


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


def unroll_batch() -> dict[str, Any]:
    """One unroll of ``JOINT`` cue-recall envs; rank 0's half has fewer valid steps than rank 1's, so the
    ranks' weights (their valid steps) differ."""
    torch.manual_seed(3)
    batch = UnrollCollector(cue_recall_policy(IMPALAPolicy), CueRecall(JOINT, seed=3)).collect(12)
    batch['mask'][-6:, : JOINT // 4] = 0.0
    return batch


def rows(batch: list[dict], rank: int) -> list[dict]:
    return batch[rank * JOINT // 2 : (rank + 1) * JOINT // 2]


def columns(batch: dict[str, Any], rank: int) -> dict[str, Any]:
    """Rank ``rank``'s half of the env columns (dim 1) of an unroll batch."""
    half = slice(rank * JOINT // 2, (rank + 1) * JOINT // 2)
    return {k: v[:, half] if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


# name -> (policy for a batch share, joint batch, a rank's half of it)
ALGOS: dict[str, tuple[Callable[[int], Any], Callable[[], Any], Callable[[Any, int], Any]]] = {
    'dqn': (lambda share: DQNPolicy(with_learn(DQN_CFG, batch_size=share)), dqn_batch, rows),
    'ppo': (lambda share: PPOPolicy(with_learn(PPO_CFG, batch_size=share)), ppo_batch, rows),
    'a2c': (lambda share: A2CPolicy(with_learn(A2C_CFG, batch_size=share)), ppo_batch, rows),
    'impala': (lambda share: cue_recall_policy(IMPALAPolicy), unroll_batch, columns),
    'appo': (lambda share: cue_recall_policy(APPOPolicy, adv_norm=False), unroll_batch, columns),
}


def dqn_bf16(overlap: bool) -> Callable[[int], Any]:
    """DQN whose config has its gradients averaged in bfloat16, overlapped with the backward or not."""
    learn = dict(grad_sync_dtype='bfloat16', overlap_gradient_sync=overlap)
    return lambda share: DQNPolicy(with_learn(DQN_CFG, batch_size=share, **learn))


def train(
    make_policy: Callable[[int], Any],
    share: int,
    data: Any,
    seed: int,
    lr_zero: bool = False,
    overlap: bool | None = None,
) -> list:
    """Parameters after ``STEPS`` learn calls on ``data``, the model built under ``seed`` (``overlap``: the
    gradients averaged while the backward runs, or not; None: as the policy's config says)."""
    torch.manual_seed(seed)
    policy = make_policy(share)
    if overlap is not None:
        policy.overlap_gradient_sync = overlap
    if lr_zero:
        for group in policy._optimizer.param_groups:
            group['lr'] = 0.0
    for _ in range(STEPS):
        policy.learn_mode.forward(data)
    return [p.detach().reshape(-1).tolist() for p in policy._model.parameters()]


def _rank_main(rank: int, port: int, out_dir: str, batches: dict[str, Any]) -> None:
    with DDPContext(init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2, timeout=30):
        if rank == 1:  # a collect/eval-only policy on one rank takes no part in the start-up broadcast
            DQNPolicy(DQN_CFG, enable_field=['collect', 'eval'])
        # Each rank builds its model under its own seed: the policy broadcasts rank 0's weights.
        result = {
            f'{algo}{suffix}': train(make, JOINT // 2, split(batches[algo], rank), seed=rank, overlap=overlap)
            for algo, (make, _, split) in ALGOS.items()
            for suffix, overlap in (('', False), ('_overlap', True))
        }
        # The gradients travelling as bfloat16, flat and overlapped, set in the config.
        for overlap in (False, True):
            data = rows(batches['dqn'], rank)
            result[f'dqn_bf16_overlap_{overlap}'] = train(dqn_bf16(overlap), JOINT // 2, data, seed=rank)
    write_result(out_dir, rank, result)


@pytest.fixture(scope='module')
def batches():
    return {algo: batch() for algo, (_, batch, _) in ALGOS.items()}


@pytest.fixture(scope='module')
def single(batches):
    """One process on the joint batch, trained and (learning rate 0) untrained. Computed before the ranks
    are forked, so they inherit the modules the first optimizer imports instead of importing them twice."""
    return {
        algo: (train(make, JOINT, batches[algo], seed=0), train(make, JOINT, batches[algo], seed=0, lr_zero=True))
        for algo, (make, _, _) in ALGOS.items()
    }


@pytest.fixture(scope='module')
def ranks(single, batches, tmp_path_factory):
    return run_ranks(_rank_main, str(tmp_path_factory.mktemp('data_parallel')), args=(batches,))


def test_a_bad_gradient_sync_setting_is_refused_naming_the_key_before_the_model_is_built():
    with pytest.raises(ValueError, match=r'policy.learn.grad_sync_dtype must be None \(lossless\) or one of'):
        DQNPolicy(with_learn(DQN_CFG, grad_sync_dtype='bf16'), model=None, enable_field=['learn'])
    with pytest.raises(ValueError, match='policy.learn.overlap_gradient_sync must be True or False, got 1'):
        DQNPolicy(with_learn(DQN_CFG, overlap_gradient_sync=1))
    policy = DQNPolicy(with_learn(DQN_CFG, overlap_gradient_sync=True))
    assert policy.overlap_gradient_sync and not DQNPolicy.overlap_gradient_sync  # set on this policy only


def max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for pa, pb in zip(a, b) for x, y in zip(pa, pb))


def distance(a: list[list[float]], b: list[list[float]]) -> float:
    """Euclidean distance between two parameter lists."""
    return sum((x - y) ** 2 for pa, pb in zip(a, b) for x, y in zip(pa, pb)) ** 0.5


@pytest.mark.parametrize('algo', list(ALGOS))
def test_two_ranks_on_halves_equal_one_process_on_the_joint_batch(ranks, single, algo):
    assert ranks[0][algo] == ranks[1][algo]  # identical on every rank, bit for bit
    trained, untrained = single[algo]
    assert max_diff(ranks[0][algo], trained) <= 1e-6
    assert max_diff(untrained, trained) > 1e-3  # the comparison above is not vacuous
    # Averaged while the backward runs (OverlappedGradientSync): the same parameters as the flat all-reduce.
    assert ranks[0][f'{algo}_overlap'] == ranks[1][f'{algo}_overlap'] == ranks[0][algo]


@pytest.mark.parametrize('overlap', [False, True])
def test_gradients_averaged_in_bfloat16_stay_close_to_the_exact_run_and_identical_on_every_rank(ranks, single, overlap):
    compressed = ranks[0][f'dqn_bf16_overlap_{overlap}']
    assert compressed == ranks[1][f'dqn_bf16_overlap_{overlap}']
    trained, untrained = single['dqn']
    assert compressed != trained  # lossy
    # Adam divides each gradient by its own scale, so a near-zero gradient whose sign the rounding flipped still
    # moves its weight by up to the learning rate: compare whole updates, not single weights.
    assert distance(compressed, trained) <= 0.1 * distance(untrained, trained)
