"""The torch.distributed helpers: argument checks in this process, then every collective between two real rank
processes on 127.0.0.1 (gloo), started once for the module and checked by several tests."""

import pytest
import torch
import torch.distributed as dist

from ding.config.parallel import find_free_port
from ding.utils.pytorch_ddp_dist_helper import (
    GRAD_SYNC_DTYPES,
    DDPContext,
    all_ranks,
    allreduce,
    allreduce_data,
    any_rank,
    broadcast,
    broadcast_module,
    broadcast_state,
    dist_finalize,
    dist_init,
    get_rank,
    get_world_size,
    grad_sync_dtype,
    sync_gradients,
)
from tests.helpers.dist_ranks import run_ranks, write_result


# ---- one process: no group ----------------------------------------------------------------------
def test_without_a_group_everything_is_rank_0_of_1_and_collectives_return_at_once():
    assert (get_rank(), get_world_size()) == (0, 1)
    x = torch.tensor([1.0, 2.0])
    allreduce(x)
    broadcast(x, src=0)
    assert x.tolist() == [1.0, 2.0]
    layer = torch.nn.Linear(2, 1)
    layer.weight.grad = torch.ones_like(layer.weight)
    sync_gradients(layer.parameters(), weight=0.0)
    assert layer.weight.grad.tolist() == [[1.0, 1.0]] and layer.bias.grad is None
    broadcast_module(layer)
    assert any_rank(True) and not any_rank(False) and all_ranks(True) and not all_ranks(False)
    assert allreduce_data({'loss': 2, 'x': 0.5}, op='mean') == {'loss': 2.0, 'x': 0.5}
    dist_finalize()  # idempotent: nothing to leave


@pytest.mark.parametrize(
    'kwargs, field',
    [
        (dict(backend='mpi'), 'backend'),
        (dict(init_method='http://127.0.0.1:1234', rank=0, world_size=1), 'init_method'),
        (dict(init_method='tcp://127.0.0.1', rank=0, world_size=1), 'port'),
        (dict(init_method='tcp://127.0.0.1:1234', world_size=2), 'rank and world_size'),
        (dict(init_method='tcp://127.0.0.1:1234', rank=2, world_size=2), 'rank must be in'),
        (dict(init_method='tcp://127.0.0.1:1234', rank=0, world_size=0), 'world_size must be'),
        (dict(init_method='tcp://127.0.0.1:1234', rank='x', world_size=2), 'rank must be an int'),
        (dict(init_method='tcp://127.0.0.1:1234', rank=0, world_size=1, timeout=0), 'timeout'),
    ],
)
def test_dist_init_names_the_bad_field_before_joining(kwargs, field):
    with pytest.raises(ValueError, match=field):
        dist_init(**kwargs)
    assert get_world_size() == 1


def test_env_init_names_the_missing_variables(monkeypatch):
    for key in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv('MASTER_ADDR', '127.0.0.1')
    with pytest.raises(ValueError, match=r"\['MASTER_PORT', 'RANK', 'WORLD_SIZE'\]"):
        dist_init()
    monkeypatch.setenv('MASTER_PORT', 'abc')
    with pytest.raises(ValueError, match='MASTER_PORT must be an int'):
        dist_init(rank=0, world_size=1)


def test_env_init_joins_as_torchrun_would_and_the_context_leaves(monkeypatch):
    monkeypatch.setenv('MASTER_ADDR', '127.0.0.1')
    monkeypatch.setenv('MASTER_PORT', str(find_free_port()))
    monkeypatch.setenv('RANK', '0')
    monkeypatch.setenv('WORLD_SIZE', '1')
    with DDPContext(timeout=10) as ctx:
        assert (ctx.rank, ctx.world_size) == (0, 1)
        assert dist.is_initialized() and dist.get_backend() == 'gloo'
    assert not dist.is_initialized()


def test_the_dtype_a_gradient_all_reduce_carries_is_none_bfloat16_or_float16():
    assert grad_sync_dtype(None) is None
    assert grad_sync_dtype('bfloat16') is grad_sync_dtype(torch.bfloat16) is torch.bfloat16
    assert grad_sync_dtype('float16') is torch.float16
    for bad in ('bf16', 'float32', torch.float32, torch.int8, 16):
        with pytest.raises(ValueError, match=r'policy.learn.grad_sync_dtype must be None \(lossless\) or one of'):
            grad_sync_dtype(bad, 'policy.learn.grad_sync_dtype')
    with pytest.raises(ValueError, match='sync_gradients: comm_dtype'):
        sync_gradients(torch.nn.Linear(1, 1).parameters(), comm_dtype='int8')


def test_sync_gradients_refuses_a_negative_or_non_finite_weight():
    for weight in (-1.0, float('nan'), float('inf')):
        with pytest.raises(ValueError, match='weight'):
            sync_gradients(torch.nn.Linear(1, 1).parameters(), weight=weight)


# ---- two ranks ----------------------------------------------------------------------------------
def _rank_main(rank: int, port: int, out_dir: str) -> None:
    """Everything one rank does; the results go to ``out_dir/rank<r>.json``."""
    result: dict = {}
    with DDPContext(init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2, timeout=30) as ctx:
        result['ids'] = [ctx.rank, ctx.world_size, get_rank(), get_world_size()]
        result['init_again'] = list(dist_init(init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2))
        try:
            dist_init(init_method=f'tcp://127.0.0.1:{port}', rank=1 - rank, world_size=2)
        except RuntimeError as e:
            result['init_other'] = str(e)

        x = torch.tensor([rank + 1.0, 10.0 * rank])
        allreduce(x)
        result['allreduce'] = x.tolist()
        y = torch.tensor([float(rank)])
        broadcast(y, src=1)
        result['broadcast'] = y.tolist()
        torch.manual_seed(rank)  # different initial weights on each rank
        module = torch.nn.BatchNorm1d(3)
        torch.nn.init.normal_(module.weight)
        module.running_mean.fill_(rank + 5.0)
        broadcast_module(module, src=0)
        result['module'] = [module.weight.tolist(), module.running_mean.tolist()]

        # Weighted mean: rank 0 grads 1 with weight 1, rank 1 grads 4 with weight 3 -> (1 + 12) / 4 = 3.25.
        # Rank 1 leaves the bias without a gradient: it counts as zeros -> (1 * 1 + 0) / 4 = 0.25.
        layer = torch.nn.Linear(2, 1)
        layer.weight.grad = torch.full_like(layer.weight, 1.0 + 3.0 * rank)
        if rank == 0:
            layer.bias.grad = torch.ones_like(layer.bias)
        sync_gradients(layer.parameters(), weight=1.0 + 2.0 * rank)
        result['weighted'] = [layer.weight.grad.tolist(), layer.bias.grad.tolist()]
        # A rank with weight 0 (an empty batch, whose mean loss is NaN) contributes nothing: rank 0's gradients win.
        layer.weight.grad = torch.full_like(layer.weight, 7.0 if rank == 0 else float('nan'))
        sync_gradients(layer.parameters(), weight=0.0 if rank == 1 else 32)
        result['weight_0'] = layer.weight.grad.tolist()
        # A NaN on a weighted rank reaches every rank: a NaN guard then skips the step everywhere together.
        layer.weight.grad = torch.full_like(layer.weight, 1.0 if rank == 0 else float('inf'))
        sync_gradients(layer.parameters(), weight=1.0)
        result['non_finite_everywhere'] = not bool(torch.isfinite(layer.weight.grad).any())
        sync_gradients(layer.parameters(), weight=0.0)
        result['all_0'] = layer.weight.grad.tolist()

        result['flags'] = [any_rank(rank == 1), all_ranks(rank == 1), any_rank(False), all_ranks(True)]
        data = {'loss': 1.0 + rank, 'steps': 10.0 * rank}
        result['data'] = {op: allreduce_data(data, op=op) for op in ('sum', 'mean', 'max', 'min')}

        # A rank that rejoined has fresh Adam moments; rank 0 has trained: after taking rank 0's state, one more
        # synced step leaves both ranks with the same weights and moments (without it they would drift apart).
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 2)
        opt = torch.optim.Adam(net.parameters(), lr=0.1)
        if rank == 0:
            for _ in range(3):
                opt.zero_grad()
                net(torch.randn(4, 3)).pow(2).sum().backward()
                opt.step()
        state = broadcast_state({'net': net.state_dict(), 'opt': opt.state_dict(), 'iter': 3} if rank == 0 else None)
        net.load_state_dict(state['net'])
        opt.load_state_dict(state['opt'])
        opt.zero_grad()
        net(torch.full((4, 3), rank + 1.0)).pow(2).sum().backward()
        sync_gradients(net.parameters())
        opt.step()
        result['state_iter'] = state['iter']
        result['after_step'] = [net.weight.tolist(), opt.state_dict()['state'][0]['exp_avg_sq'].tolist()]

        # Compressed averaging: every rank's gradients (seeded by rank, weights 1 and 3) and what each dtype made.
        result['compressed'] = {}
        for name in GRAD_SYNC_DTYPES:
            layer.weight.grad = torch.randn(1, 2, generator=torch.Generator().manual_seed(rank)) * 10.0 ** (2 * rank)
            layer.bias.grad = torch.randn(1, generator=torch.Generator().manual_seed(10 + rank))
            sent = [layer.weight.grad.tolist(), layer.bias.grad.tolist()]
            sync_gradients(layer.parameters(), weight=1.0 + 2.0 * rank, comm_dtype=name)
            result['compressed'][name] = {'sent': sent, 'mean': [layer.weight.grad.tolist(), layer.bias.grad.tolist()]}
            # The mean of 40960 and 40960 is 40960 in float16 (max 65504): the ranks' shares are divided before the sum.
            layer.weight.grad = torch.full_like(layer.weight, 40960.0)
            sync_gradients(layer.parameters(), weight=256, comm_dtype=name)
            result['compressed'][name]['large'] = layer.weight.grad.tolist()
            layer.weight.grad = torch.full_like(layer.weight, 7.0 if rank == 0 else float('nan'))
            sync_gradients(layer.parameters(), weight=0.0 if rank == 1 else 32, comm_dtype=name)
            result['compressed'][name]['weight_0'] = layer.weight.grad.tolist()
            layer.weight.grad = torch.full_like(layer.weight, 1.0 if rank == 0 else float('inf'))
            sync_gradients(layer.parameters(), weight=1.0, comm_dtype=name)
            result['compressed'][name]['non_finite'] = not bool(torch.isfinite(layer.weight.grad).any())
            sync_gradients(layer.parameters(), weight=0.0, comm_dtype=name)
            result['compressed'][name]['all_0'] = layer.weight.grad.tolist()
    result['after'] = [get_rank(), get_world_size()]
    write_result(out_dir, rank, result)


@pytest.fixture(scope='module')
def ranks(tmp_path_factory):
    return run_ranks(_rank_main, str(tmp_path_factory.mktemp('ddp')))


def test_each_rank_knows_its_place_and_leaves_the_group_on_exit(ranks):
    for r, res in enumerate(ranks):
        assert res['ids'] == [r, 2, r, 2]
        assert res['init_again'] == [r, 2]
        assert 'already in a group as rank' in res['init_other']
        assert res['after'] == [0, 1]


def test_allreduce_averages_and_broadcasts_copy_from_the_source(ranks):
    for res in ranks:
        assert res['allreduce'] == [1.5, 5.0]
        assert res['broadcast'] == [1.0]
    assert ranks[0]['module'] == ranks[1]['module']
    assert ranks[0]['module'][1] == [5.0, 5.0, 5.0]


def test_sync_gradients_is_a_weighted_mean_where_weight_0_contributes_nothing(ranks):
    for res in ranks:
        assert res['weighted'] == [[[3.25, 3.25]], [0.25]]
        assert res['weight_0'] == [[7.0, 7.0]]
        assert res['all_0'] == [[0.0, 0.0]]
        assert res['non_finite_everywhere']


# significand bits of each compressed dtype: one rounding of a value of magnitude m errs by at most m * 2**-bits
SIGNIFICAND_BITS = {'bfloat16': 8, 'float16': 11}


@pytest.mark.parametrize('name', list(GRAD_SYNC_DTYPES))
def test_compressed_sync_gradients_is_the_weighted_mean_to_the_dtypes_precision_and_identical_on_every_rank(
    ranks, name
):
    received = [{k: v for k, v in r['compressed'][name].items() if k != 'sent'} for r in ranks]
    assert received[0] == received[1]  # bit for bit
    sent = [torch.tensor(r['compressed'][name]['sent'][0][0] + r['compressed'][name]['sent'][1]) for r in ranks]
    shares = [sent[0] * 1 / 4, sent[1] * 3 / 4]  # weights 1 and 3; rank 1's weights are 100x larger
    exact = shares[0] + shares[1]
    mean = ranks[0]['compressed'][name]['mean']
    got = torch.tensor(mean[0][0] + mean[1])
    # each share rounded once, their sum once more
    bound = 2.0 ** -SIGNIFICAND_BITS[name] * (shares[0].abs() + shares[1].abs() + exact.abs())
    assert ((got - exact).abs() <= bound).all(), (got, exact)
    assert not torch.equal(got, exact)  # it did travel compressed: the lossless path gives the exact mean
    res = ranks[0]['compressed'][name]
    assert res['large'] == [[40960.0, 40960.0]]
    assert res['weight_0'] == [[7.0, 7.0]]
    assert res['non_finite']
    assert res['all_0'] == [[0.0, 0.0]]


def test_flags_and_data_reductions(ranks):
    for res in ranks:
        assert res['flags'] == [True, False, False, True]
        assert res['data'] == {
            'sum': {'loss': 3.0, 'steps': 10.0},
            'mean': {'loss': 1.5, 'steps': 5.0},
            'max': {'loss': 2.0, 'steps': 10.0},
            'min': {'loss': 1.0, 'steps': 0.0},
        }


def test_broadcast_state_gives_every_rank_rank_0s_weights_and_optimizer_moments(ranks):
    assert ranks[1]['state_iter'] == 3
    assert ranks[0]['after_step'] == ranks[1]['after_step']
