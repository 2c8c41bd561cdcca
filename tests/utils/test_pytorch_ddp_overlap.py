"""Gradient averaging overlapped with the backward: the bucket layout and argument checks in this process, then two
real rank processes on 127.0.0.1 (gloo), started once for the module, compared with the flat ``sync_gradients``."""

import pytest
import torch

from ding.utils.pytorch_ddp_dist_helper import DDPContext, sync_gradients
from ding.utils.pytorch_ddp_overlap import OverlappedGradientSync
from tests.helpers.dist_ranks import run_ranks, write_result


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))


def grads(model: torch.nn.Module) -> list:
    return [p.grad.tolist() for p in model.parameters()]


# ---- one process ----------------------------------------------------------------------------------
def test_buckets_follow_the_backward_order_and_close_once_full():
    model = mlp()  # float32 sizes in backward order: 2, 16 | 8, 64 | 8, 24
    sync = OverlappedGradientSync(model.parameters(), bucket_bytes=40 * 4)
    assert sync.bucket_sizes == [2 + 16 + 8 + 64, 8 + 24]
    sync.stop()
    assert OverlappedGradientSync(model.parameters()).bucket_sizes == [122]  # 1 MB by default: one bucket


def test_without_a_group_averaging_is_a_plain_backward():
    model = mlp()
    sync = OverlappedGradientSync(model.parameters())
    with sync.averaging(weight=0):
        model(torch.ones(1, 3)).sum().backward()
    expected = mlp()
    expected(torch.ones(1, 3)).sum().backward()
    assert grads(model) == grads(expected)


def test_bad_arguments_are_named():
    model = mlp()
    with pytest.raises(ValueError, match='bucket_bytes'):
        OverlappedGradientSync(model.parameters(), bucket_bytes=0)
    with pytest.raises(ValueError, match='no parameter requires a gradient'):
        OverlappedGradientSync([torch.zeros(2)])
    with pytest.raises(ValueError, match=r"comm_dtype must be None \(lossless\) or one of \['bfloat16', 'float16'\]"):
        OverlappedGradientSync(model.parameters(), comm_dtype='float8')
    sync = OverlappedGradientSync(model.parameters())
    for weight in (-1, float('nan'), float('inf'), True):
        with pytest.raises(ValueError, match='weight'), sync.averaging(weight=weight):
            pass


# ---- two ranks ----------------------------------------------------------------------------------
def _step(
    sync: OverlappedGradientSync | None,
    model: torch.nn.Module,
    x: torch.Tensor,
    weight: float,
    comm_dtype: str | None = None,
) -> list:
    """One backward on ``x`` averaged over the ranks, overlapped (``sync``) or flat (``None``, carrying
    ``comm_dtype``)."""
    for p in model.parameters():
        p.grad = None
    loss = model(x).pow(2).mean()
    if sync is None:
        loss.backward()
        sync_gradients(model.parameters(), weight=weight, comm_dtype=comm_dtype)
    else:
        with sync.averaging(weight=weight):
            loss.backward()
    return grads(model)


def _rank_main(rank: int, port: int, out_dir: str) -> None:
    result: dict = {}
    with DDPContext(init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2, timeout=30):
        model = mlp()
        sync = OverlappedGradientSync(model.parameters(), bucket_bytes=40 * 4)  # two buckets
        x = torch.randn(1 + 3 * rank, 3, generator=torch.Generator().manual_seed(rank))  # uneven batches: 1 and 4
        result['flat'] = _step(None, model, x, weight=len(x))
        result['overlap'] = _step(sync, model, x, weight=len(x))
        result['again'] = _step(sync, model, x, weight=len(x))  # the buckets are reused
        # A backward outside averaging(...) is an ordinary one: no collective, this rank's own gradients.
        for p in model.parameters():
            p.grad = None
        model(x).pow(2).mean().backward()
        result['outside'] = grads(model)
        # An empty batch's loss is NaN: with weight 0 the rank contributes nothing, rank 1's gradients win.
        empty = x[:0] if rank == 0 else x
        result['weight_0'] = _step(sync, model, empty, weight=0 if rank == 0 else len(x))
        # Rank 0 leaves the last layer out of the graph: its gradients count as zeros, and it still gets them.
        head = model[:3] if rank == 0 else model
        for p in model.parameters():
            p.grad = None
        with sync.averaging(weight=1):
            (head(x).sum() if rank == 0 else head(x).sum() * 0 + 2 * model[3].bias.sum()).backward()
        result['unused'] = model[3].bias.grad.tolist()
        # A non-finite gradient on a weighted rank reaches every rank (a NaN guard skips the step everywhere).
        inf = torch.full((1, 3), float('inf') if rank == 1 else 1.0)
        _step(sync, model, inf, weight=1)
        result['non_finite'] = not torch.isfinite(model[0].weight.grad).any().item()
        # Half-precision gradients: the weights' sum travels in its own float64 all-reduce.
        half = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
        half_sync = OverlappedGradientSync([half])
        with half_sync.averaging(weight=1 + 2 * rank):
            (half * (1.0 + 3.0 * rank)).sum().backward()
        result['half'] = half.grad.tolist()  # (1 * 1 + 4 * 3) / 4
        # Two gradients for one parameter in one averaging(...) is refused (it would mix weighted and raw sums).
        try:
            with sync.averaging(weight=1):
                model(x).sum().backward()
                model(x).sum().backward()
        except RuntimeError as e:
            result['second_backward'] = str(e)
        # Compressed (bfloat16 on the wire): the same numbers as the compressed flat all-reduce; three SGD steps
        # keep every rank's parameters identical after each.
        packed = OverlappedGradientSync(model.parameters(), bucket_bytes=40 * 4, comm_dtype='bfloat16')
        result['bf16_flat'] = _step(None, model, x, weight=len(x), comm_dtype='bfloat16')
        result['bf16_overlap'] = _step(packed, model, x, weight=len(x))
        result['bf16_weight_0'] = _step(packed, model, empty, weight=0 if rank == 0 else len(x))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        result['bf16_params'] = []
        for _ in range(3):
            _step(packed, model, x, weight=len(x))
            optimizer.step()
            result['bf16_params'].append([p.tolist() for p in model.parameters()])
        packed.stop()
    write_result(out_dir, rank, result)


@pytest.fixture(scope='module')
def ranks(tmp_path_factory):
    return run_ranks(_rank_main, str(tmp_path_factory.mktemp('overlap')))


def test_overlapped_averaging_equals_the_flat_all_reduce_and_is_identical_on_every_rank(ranks):
    for res in ranks:
        assert res['overlap'] == res['flat'] == ranks[0]['flat']
        assert res['again'] == res['overlap']


def test_a_backward_outside_averaging_keeps_this_ranks_own_gradients(ranks):
    assert ranks[0]['outside'] != ranks[1]['outside']


def test_weight_0_contributes_nothing_and_a_missing_gradient_counts_as_zeros(ranks):
    for res in ranks:
        assert res['weight_0'] == ranks[1]['outside']  # rank 1's own gradients: (0 + 4 * g) / 4
        assert res['unused'] == [1.0, 1.0]  # (0 + 2) / 2
        assert res['non_finite']
        assert res['half'] == [3.25] * 4


def test_compressed_overlapped_averaging_equals_the_compressed_flat_one_and_keeps_the_ranks_identical(ranks):
    for res in ranks:
        assert res['bf16_overlap'] == res['bf16_flat'] == ranks[0]['bf16_flat']
        assert res['bf16_params'] == ranks[0]['bf16_params']  # after every step
    exact, compressed = ranks[0]['flat'], ranks[0]['bf16_flat']
    assert exact != compressed  # lossy
    for exact_p, compressed_p in zip(exact, compressed):
        e, c = torch.tensor(exact_p), torch.tensor(compressed_p)
        assert torch.allclose(c, e, rtol=2**-7, atol=2**-7 * e.abs().max().item())
    # weight 0: rank 1's own gradients, rounded to bfloat16
    for own, got in zip(ranks[1]['outside'], ranks[0]['bf16_weight_0']):
        assert torch.equal(torch.tensor(got), torch.tensor(own).to(torch.bfloat16).float())


def test_a_second_backward_in_one_averaging_is_refused(ranks):
    for res in ranks:
        assert 'second gradient' in res['second_backward']
