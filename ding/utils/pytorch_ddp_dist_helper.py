"""Data-parallel training on ``torch.distributed``: joining a process group and the few collectives RL needs.

Every function works without a process group (a single process): ranks are ``0`` of ``1`` and the collectives
return at once, so code written for N ranks runs unchanged on one. Backends: ``gloo`` on CPU, ``nccl`` on GPU
(tensors handed to the collectives must then live on the GPU; the small ones made here do).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from datetime import timedelta
from numbers import Real
from types import TracebackType
from urllib.parse import urlsplit

import torch
import torch.distributed as dist

from .checkpoint import decode_state, encode_state

BACKENDS = ('gloo', 'nccl')
REDUCE_OPS = ('sum', 'mean', 'max', 'min')
# What a gradient all-reduce may carry in place of the gradients' own dtype (``policy.learn.grad_sync_dtype``):
# half the bytes on the wire, the averaged gradients rounded to 8 (bfloat16) or 11 (float16) significant bits.
GRAD_SYNC_DTYPES: dict[str, torch.dtype] = {'bfloat16': torch.bfloat16, 'float16': torch.float16}


# ---- who am I -----------------------------------------------------------------------------------
def is_initialized() -> bool:
    """Whether this process has joined a process group."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank in the group; 0 when there is no group."""
    return dist.get_rank() if is_initialized() else 0


def get_world_size() -> int:
    """Number of ranks in the group; 1 when there is no group."""
    return dist.get_world_size() if is_initialized() else 1


# ---- joining and leaving ------------------------------------------------------------------------
def _int_field(value: object, field: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f'dist_init: {field} must be an int, got {value!r}')
    try:
        return int(str(value)) if isinstance(value, str) else int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f'dist_init: {field} must be an int, got {value!r}') from None


def _check_tcp_address(init_method: str) -> None:
    parts = urlsplit(init_method)
    if parts.scheme != 'tcp':
        raise ValueError(f"dist_init: init_method must be 'tcp://HOST:PORT' or None (env://), got {init_method!r}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or not 0 < port < 65536:
        raise ValueError(f'dist_init: init_method needs a host and a port 1-65535, got {init_method!r}')


def dist_init(
    backend: str = 'gloo',
    init_method: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    timeout: float = 60.0,
) -> tuple[int, int]:
    """Join the process group and return ``(rank, world_size)``.

    ``init_method='tcp://HOST:PORT'`` (rank 0 listens there) needs ``rank`` and ``world_size``; ``None`` reads
    ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` from the environment as ``torchrun`` sets
    them (explicit ``rank`` / ``world_size`` win). ``timeout`` (seconds) bounds the rendezvous and every
    collective afterwards. Joining again with the same rank and size is a no-op.
    """
    if backend not in BACKENDS:
        raise ValueError(f'dist_init: backend must be one of {BACKENDS}, got {backend!r}')
    if backend == 'nccl' and not torch.cuda.is_available():
        raise ValueError("dist_init: backend 'nccl' needs CUDA, which is not available here; use 'gloo'")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f'dist_init: timeout must be a number of seconds > 0, got {timeout!r}')
    if init_method is None:
        needed = ['MASTER_ADDR', 'MASTER_PORT'] + ['RANK'] * (rank is None) + ['WORLD_SIZE'] * (world_size is None)
        missing = [k for k in needed if k not in os.environ]
        if missing:
            raise ValueError(f'dist_init: init_method=None (env://) needs the environment variable(s) {missing}')
        rank = _int_field(os.environ['RANK'] if rank is None else rank, 'rank')
        world_size = _int_field(os.environ['WORLD_SIZE'] if world_size is None else world_size, 'world_size')
        port = _int_field(os.environ['MASTER_PORT'], 'MASTER_PORT')
        if not 0 < port < 65536:
            raise ValueError(f'dist_init: MASTER_PORT must be 1-65535, got {port}')
        url = 'env://'
    else:
        if not isinstance(init_method, str):
            raise ValueError(f'dist_init: init_method must be a str or None, got {init_method!r}')
        _check_tcp_address(init_method)
        if rank is None or world_size is None:
            raise ValueError('dist_init: init_method tcp://... needs both rank and world_size')
        rank, world_size = _int_field(rank, 'rank'), _int_field(world_size, 'world_size')
        url = init_method
    if world_size < 1:
        raise ValueError(f'dist_init: world_size must be >= 1, got {world_size}')
    if not 0 <= rank < world_size:
        raise ValueError(f'dist_init: rank must be in [0, {world_size}), got {rank}')
    if is_initialized():
        if (get_rank(), get_world_size()) != (rank, world_size):
            raise RuntimeError(
                f'dist_init: already in a group as rank {get_rank()} of {get_world_size()}, asked for {rank} of '
                f'{world_size}; call dist_finalize() first'
            )
        return rank, world_size
    if backend == 'nccl':
        local_rank = _int_field(os.environ.get('LOCAL_RANK', rank % torch.cuda.device_count()), 'LOCAL_RANK')
        torch.cuda.set_device(local_rank)
    dist.init_process_group(
        backend, init_method=url, rank=rank, world_size=world_size, timeout=timedelta(seconds=float(timeout))
    )
    return rank, world_size


def dist_finalize() -> None:
    """Leave the process group (nothing happens when there is none)."""
    if is_initialized():
        dist.destroy_process_group()


class DDPContext:
    """``with DDPContext(...):`` joins the group on entry (arguments as ``dist_init``) and leaves it on exit."""

    def __init__(
        self,
        backend: str = 'gloo',
        init_method: str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        timeout: float = 60.0,
    ) -> None:
        self._args = dict(backend=backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
        self.rank, self.world_size = 0, 1

    def __enter__(self) -> DDPContext:
        self.rank, self.world_size = dist_init(**self._args)  # type: ignore[arg-type]
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        dist_finalize()


# ---- collectives --------------------------------------------------------------------------------
def _comm_device() -> torch.device:
    """Where the small tensors made here live: the current GPU under nccl, else the CPU."""
    if dist.get_backend() == 'nccl':
        return torch.device('cuda', torch.cuda.current_device())
    return torch.device('cpu')


def allreduce(x: torch.Tensor) -> None:
    """Replace the floating tensor ``x`` by its mean over the ranks, in place."""
    if not x.is_floating_point():
        raise TypeError(f'allreduce: averaging needs a floating tensor, got {x.dtype}')
    world_size = get_world_size()
    if world_size > 1:
        dist.all_reduce(x)
        x.div_(world_size)


def broadcast(x: torch.Tensor, src: int = 0) -> None:
    """Overwrite ``x`` on every rank with rank ``src``'s value, in place."""
    if get_world_size() > 1:
        dist.broadcast(x, src)


def broadcast_module(module: torch.nn.Module, src: int = 0) -> None:
    """Give every rank rank ``src``'s parameters and buffers (one broadcast per tensor; done once at start)."""
    if get_world_size() == 1:
        return
    with torch.no_grad():
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.data, src)


def grad_sync_dtype(value: str | torch.dtype | None, key: str = 'comm_dtype') -> torch.dtype | None:
    """The dtype a gradient all-reduce carries for ``value``: None (the gradients' own, lossless), or a name of
    ``GRAD_SYNC_DTYPES`` (``'bfloat16'``, ``'float16'``) or its torch dtype. Anything else is refused naming ``key``."""
    if value is None:
        return None
    if isinstance(value, str) and value in GRAD_SYNC_DTYPES:
        return GRAD_SYNC_DTYPES[value]
    if isinstance(value, torch.dtype) and value in GRAD_SYNC_DTYPES.values():
        return value
    raise ValueError(f'{key} must be None (lossless) or one of {list(GRAD_SYNC_DTYPES)}, got {value!r}')


def sync_gradients(
    parameters: Iterable[torch.Tensor], weight: float = 1.0, comm_dtype: str | torch.dtype | None = None
) -> None:
    """Set every rank's gradients to the weighted mean ``sum_i(w_i * g_i) / sum_i(w_i)`` over the ranks.

    With ``weight`` = the number of samples in this rank's batch and a loss that is the mean over the batch,
    the result is the gradient of the mean loss over the union of the batches. One flat all-reduce carries the
    gradients and the weight. A parameter without a gradient counts as zeros (and gets a zero gradient); a
    rank with ``weight=0`` contributes nothing (not even NaNs). A non-finite gradient on a rank with a weight
    makes every rank's gradients non-finite, so a NaN guard skips the step on every rank together. If every
    weight is 0 the gradients become zeros.

    ``comm_dtype`` (``'bfloat16'`` / ``'float16'``, ``grad_sync_dtype``) compresses: the weights' sum travels
    first (float64), then each rank's ``g_i * w_i / sum(w)`` rounded to ``comm_dtype`` (half the bytes; the
    pre-division keeps float16 in range), and the mean is cast back into the gradients. Lossy (8 or 11
    significant bits), identical on every rank. None (the default) is exact.
    """
    if isinstance(weight, bool) or not isinstance(weight, Real) or not math.isfinite(weight) or weight < 0:
        raise ValueError(f'sync_gradients: weight must be a finite number >= 0, got {weight!r}')
    wire_dtype = grad_sync_dtype(comm_dtype, 'sync_gradients: comm_dtype')
    if get_world_size() == 1:
        return
    params = [p for p in parameters if p.requires_grad]
    if not params:
        raise ValueError('sync_gradients: no parameter requires a gradient')
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params if p.grad is not None]
    dtype = grads[0].dtype
    for g in grads[1:]:
        dtype = torch.promote_types(dtype, g.dtype)
    if wire_dtype is None or wire_dtype == dtype:
        summed, total = _weighted_sum(grads, dtype, float(weight))
    else:
        summed, total = _compressed_weighted_mean(grads, float(weight), wire_dtype), None
    offset = 0
    for g in grads:  # one pass: divided (or cast back) straight into the gradient
        part = summed[offset : offset + g.numel()].view_as(g)
        if total is None:
            g.copy_(part)
        elif total > 0:
            torch.div(part, total, out=g)
        else:
            g.zero_()
        offset += g.numel()


def _write_scaled(flat_grads: list[torch.Tensor], out: torch.Tensor, factor: float) -> None:
    """``out``'s leading slices, one per gradient in order, set to ``gradient * factor`` (in ``out``'s dtype)."""
    offset = 0
    for g in flat_grads:
        part = out[offset : offset + g.numel()]
        if factor == 0:
            part.zero_()  # not a multiplication: the gradients of an empty batch may be NaN, and 0 * NaN is NaN
        else:
            torch.mul(g, factor, out=part)
        offset += g.numel()


def _weighted_sum(grads: list[torch.Tensor], dtype: torch.dtype, weight: float) -> tuple[torch.Tensor, float]:
    """``sum_i(w_i * g_i)`` over the ranks, flat, in ``dtype``, and ``sum_i(w_i)``: one all-reduce carrying both."""
    flat = torch.empty(sum(g.numel() for g in grads) + 1, dtype=dtype, device=grads[0].device)
    _write_scaled([g.reshape(-1).to(dtype) for g in grads], flat, weight)
    flat[-1] = weight
    dist.all_reduce(flat)
    return flat[:-1], float(flat[-1])


def _compressed_weighted_mean(grads: list[torch.Tensor], weight: float, wire_dtype: torch.dtype) -> torch.Tensor:
    """The weighted mean of ``grads`` over the ranks, flat, in ``wire_dtype`` (what travelled)."""
    total_cell = torch.tensor([weight], dtype=torch.float64, device=grads[0].device)
    dist.all_reduce(total_cell)
    total = float(total_cell)
    wire = torch.empty(sum(g.numel() for g in grads), dtype=wire_dtype, device=grads[0].device)
    if total == 0:  # every rank knows it: nothing to send
        return wire.zero_()
    # this rank's share of the mean, rounded once: the sum stays in the gradients' range (float16: <= 65504)
    _write_scaled([g.reshape(-1) for g in grads], wire, weight / total)
    dist.all_reduce(wire)
    return wire


def _flag_reduce(flag: bool, op: dist.ReduceOp.RedOpType) -> bool:
    cell = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_comm_device())
    dist.all_reduce(cell, op=op)
    return bool(cell.item())


def any_rank(flag: bool) -> bool:
    """True on every rank when ``flag`` is True on at least one rank (e.g. "stop now")."""
    return _flag_reduce(flag, dist.ReduceOp.MAX) if get_world_size() > 1 else bool(flag)


def all_ranks(flag: bool) -> bool:
    """True on every rank when ``flag`` is True on every rank (e.g. "everyone has data")."""
    return _flag_reduce(flag, dist.ReduceOp.MIN) if get_world_size() > 1 else bool(flag)


def allreduce_data(data: dict[str, float], op: str = 'sum') -> dict[str, float]:
    """``data`` reduced over the ranks key by key with ``op`` (``sum``, ``mean``, ``max`` or ``min``) in one
    all-reduce; every rank must pass the same keys."""
    if op not in REDUCE_OPS:
        raise ValueError(f'allreduce_data: op must be one of {REDUCE_OPS}, got {op!r}')
    world_size = get_world_size()
    if world_size == 1 or not data:
        return {k: float(v) for k, v in data.items()}
    keys = sorted(data)
    values = torch.tensor([float(data[k]) for k in keys], dtype=torch.float64, device=_comm_device())
    reduce_op = {'sum': dist.ReduceOp.SUM, 'mean': dist.ReduceOp.SUM, 'max': dist.ReduceOp.MAX}.get(
        op, dist.ReduceOp.MIN
    )
    dist.all_reduce(values, op=reduce_op)
    if op == 'mean':
        values /= world_size
    return dict(zip(keys, values.tolist()))


def broadcast_state(state: dict | None, src: int = 0) -> dict:
    """Rank ``src``'s ``state`` (a nested dict as a checkpoint holds: tensors, numbers, strings) on every rank.

    Other ranks pass None (or anything: it is ignored). For what ``broadcast_module`` cannot align, e.g. the
    optimizer moments a rank that rejoined a group lacks. The state travels in the checkpoint format (two
    broadcasts: its length, then its bytes), never pickled. Without a group, returns ``state`` unchanged.
    """
    if get_world_size() == 1:
        if state is None:
            raise ValueError('broadcast_state: a single process must pass its state')
        return state
    rank, device = get_rank(), _comm_device()
    if rank == src:
        if state is None:
            raise ValueError(f'broadcast_state: rank {src} (the source) passed no state')
        data = encode_state(state)
        size = torch.tensor([len(data)], dtype=torch.int64, device=device)
        dist.broadcast(size, src)
        dist.broadcast(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device), src)
        return state
    size = torch.zeros(1, dtype=torch.int64, device=device)
    dist.broadcast(size, src)
    payload = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(payload, src)
    return decode_state(payload.cpu().numpy().tobytes(), f'the state broadcast by rank {src}')
