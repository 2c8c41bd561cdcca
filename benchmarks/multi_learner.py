"""Data-parallel learners (issue #13): equivalence with one learner, and throughput of 1 vs N ranks.

    python benchmarks/multi_learner.py [--part both|equivalence|throughput|assignment] [--ranks 2] [--steps 100]
        [--rounds 3] [--sync flat overlap ddp flat-bf16 overlap-bf16 ...] [--bucket-mb 1] [--threads 1] [--pin]

Every rank is a process of one gloo group on 127.0.0.1 (``ding.utils.pytorch_ddp_dist_helper``), ``--threads``
torch threads each (a lone rank too: like with like).

* **Equivalence** (``--part equivalence``): ``DQNPolicy`` (CartPole-sized model, Adam) trained for ``--updates``
  updates on a fixed batch of ``--joint-batch`` samples, once in one process on the whole batch and once with
  every rank on its share; the largest |parameter difference| to the single process is printed (target
  <= 1e-6), and after every update every rank's parameters are checked equal to rank 0's (bit for bit). Once
  more with ``grad_sync_dtype='bfloat16'`` (lossy: how far it drifts; the ranks still identical).
* **Throughput** (``--part throughput``): a learner-bound setting, a 4 x 512 MLP regression with Adam, batch
  ``--batch`` (256) per rank, ``--steps`` timed steps after ``--warmup``. Runs of 1 rank and of ``--ranks`` ranks
  with each gradient averaging of ``--sync`` (``flat``: ``sync_gradients`` after the backward, one all-reduce;
  ``overlap``: ``OverlappedGradientSync``, buckets of ``--bucket-mb`` all-reduced during the backward; ``ddp``:
  torch's ``DistributedDataParallel``, a reference; a ``-bf16`` / ``-fp16`` suffix: the gradients travel as
  bfloat16 / float16, ``comm_dtype`` of ``sync_gradients`` and ``OverlappedGradientSync``, torch's compress comm hooks
  for ``ddp``) interleaved ``--rounds`` times, medians printed side by side:
  samples trained per second (target >= 1.5x one rank on 2 ranks), by wall clock and per rank CPU second (what
  the ranks give with a free core each; the steadier figure on a shared machine), the time per step spent
  averaging after the backward ended (including waiting for the slowest rank), and the flat all-reduce alone
  after a barrier (``--sync-repeats`` times; once per dtype on the wire). ``--pin`` puts rank r on core r.
* **Assignment** (``--part assignment``): duplicate-sample rate of ``assignment: random`` vs ``bins``
  (``multi_learner_assignment.py``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any

import torch
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ding.config.parallel import find_free_port  # noqa: E402
from ding.policy import DQNPolicy  # noqa: E402
from ding.utils.pytorch_ddp_dist_helper import (  # noqa: E402
    DDPContext,
    all_ranks,
    broadcast,
    get_world_size,
    sync_gradients,
)
from ding.utils.pytorch_ddp_overlap import OverlappedGradientSync  # noqa: E402

DQN_CFG = dict(
    type='dqn',
    model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[128, 128, 64]),
    learn=dict(learning_rate=1e-3, target_update_freq=20),
)
IN_DIM, HIDDEN, LAYERS, OUT_DIM = 64, 512, 4, 8
# --sync: a gradient averaging, optionally with the dtype its all-reduces carry (None: float32, lossless)
SYNC_METHODS = ('flat', 'overlap', 'ddp')
WIRE_DTYPES = {'': None, '-bf16': 'bfloat16', '-fp16': 'float16'}
# torch's bfloat16 comm hook for DDP needs NCCL (refused on gloo): no ddp-bf16
SYNC_CHOICES = tuple(m + s for s in WIRE_DTYPES for m in SYNC_METHODS if m + s != 'ddp-bf16')
DDP_COMPRESS_HOOKS = {'float16': default_hooks.fp16_compress_hook}


def parse_sync(sync: str) -> tuple[str, str | None]:
    """``'overlap-bf16'`` -> ``('overlap', 'bfloat16')``."""
    method, _, suffix = sync.partition('-')
    return method, WIRE_DTYPES['-' + suffix if suffix else '']


# ---- running ranks ------------------------------------------------------------------------------
def _rank_entry(target: Any, rank: int, world_size: int, port: int, args: argparse.Namespace, results: Any) -> None:
    torch.set_num_threads(args.threads)
    if args.pin:  # rank r on core r (a lone rank on core 0): no migrations, the same cores in every run
        os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})
    with DDPContext(init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world_size, timeout=300):
        results.put((rank, target(rank, args)))


def run_group(target: Any, world_size: int, args: argparse.Namespace) -> list[Any]:
    """``target(rank, args)`` in ``world_size`` fresh processes of one group; the results by rank."""
    ctx = mp.get_context('spawn')
    results = ctx.Queue()
    port = find_free_port()
    procs = [
        ctx.Process(target=_rank_entry, args=(target, r, world_size, port, args, results)) for r in range(world_size)
    ]
    for p in procs:
        p.start()
    try:
        out = dict(results.get(timeout=600) for _ in procs)
        for p in procs:
            p.join(60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    return [out[r] for r in range(world_size)]


# ---- equivalence --------------------------------------------------------------------------------
def dqn_data(n: int) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    return [
        {
            'obs': torch.randn(4, generator=g),
            'next_obs': torch.randn(4, generator=g),
            'action': torch.randint(0, 2, (), generator=g),
            'reward': torch.rand((), generator=g),
            'done': i % 9 == 0,
        }
        for i in range(n)
    ]


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def equivalence_rank(rank: int, args: argparse.Namespace) -> dict[str, Any]:
    """DQN on this rank's share of the fixed batch (its gradients averaged in ``args.grad_sync_dtype``); rank 0's
    parameters and whether ranks ever differed."""
    if getattr(args, 'float64', False):
        torch.set_default_dtype(torch.float64)  # model and data: what is left is the all-reduce's own rounding
    world_size = get_world_size()
    share = args.joint_batch // world_size
    data = dqn_data(args.joint_batch)[rank * share : (rank + 1) * share]
    torch.manual_seed(rank)  # different initial weights per rank: the policy broadcasts rank 0's
    learn = {**DQN_CFG['learn'], 'batch_size': share, 'grad_sync_dtype': getattr(args, 'grad_sync_dtype', None)}
    policy = DQNPolicy({**DQN_CFG, 'learn': learn})
    model = policy._model
    always_equal = True
    start = flat_params(model).tolist()
    for _ in range(args.updates):
        policy.learn_mode.forward(data)
        mine = flat_params(model)
        rank0 = mine.clone()
        broadcast(rank0, src=0)
        always_equal = all_ranks(bool(torch.equal(mine, rank0))) and always_equal
    return {'params': flat_params(model).tolist(), 'start': start, 'always_equal': always_equal}


def equivalence_rows(args: argparse.Namespace) -> list[tuple[str, str]]:
    single = run_group(equivalence_rank, 1, args)[0]
    multi = run_group(equivalence_rank, args.ranks, args)
    # float32 differs from one rank by rounding (sums over 64 samples vs two 32-sample sums and an all-reduce)
    # that 100 Adam steps carry along: hardware dependent (1.9e-7 on one VM, 2e-5 on another); in float64 the
    # same runs show the averaging itself is exact up to float64 rounding
    wide = argparse.Namespace(**vars(args), float64=True)
    wide_diff = max(
        abs(a - b)
        for a, b in zip(
            run_group(equivalence_rank, args.ranks, wide)[0]['params'],
            run_group(equivalence_rank, 1, wide)[0]['params'],
        )
    )
    # the same with the gradients averaged in bfloat16: lossy, so not held to 1e-6 (how far it drifts)
    packed = run_group(equivalence_rank, args.ranks, argparse.Namespace(**vars(args), grad_sync_dtype='bfloat16'))
    diff = max(abs(a - b) for a, b in zip(multi[0]['params'], single['params']))
    packed_diff = max(abs(a - b) for a, b in zip(packed[0]['params'], single['params']))
    moved = torch.tensor(single['params']) - torch.tensor(single['start'])  # the exact run's total update
    packed_off = torch.tensor(packed[0]['params']) - torch.tensor(single['params'])
    return [
        (f'DQN, {args.updates} updates, joint batch {args.joint_batch}', f'1 rank vs {args.ranks} ranks'),
        ('float64: max |param diff| (target <= 1e-6: the averaging is exact)', f'{wide_diff:.2e}'),
        ('float32: max |param diff| (rounding order, machine dependent: benchmarks/NOTES.md)', f'{diff:.2e}'),
        ('ranks identical after every update', str(all(r['always_equal'] for r in multi))),
        ('grad_sync_dtype=bfloat16: max |param diff| (lossy) / its norm over the exact update\'s norm',
         f'{packed_diff:.2e} / {packed_off.norm() / moved.norm():.1%}'),
        ('grad_sync_dtype=bfloat16: ranks identical after every update', str(all(r['always_equal'] for r in packed))),
    ]  # fmt: skip


# ---- throughput ---------------------------------------------------------------------------------
def mlp() -> nn.Module:
    layers: list[nn.Module] = []
    width = IN_DIM
    for _ in range(LAYERS):
        layers += [nn.Linear(width, HIDDEN), nn.ReLU()]
        width = HIDDEN
    layers.append(nn.Linear(width, OUT_DIM))
    return nn.Sequential(*layers)


def throughput_rank(rank: int, args: argparse.Namespace) -> dict[str, float]:
    """Timed training steps with gradient averaging ``args.sync``: ``flat`` (``sync_gradients`` after the backward),
    ``overlap`` (``OverlappedGradientSync`` during it) or ``ddp`` (torch's ``DistributedDataParallel``, equal
    weights only: a reference), each optionally compressed (``-bf16``, ``-fp16``)."""
    method, wire = parse_sync(args.sync)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(args.batch, IN_DIM, generator=g), torch.randn(args.batch, OUT_DIM, generator=g)
    bucket_bytes = int(args.bucket_mb * 2**20)
    overlap = OverlappedGradientSync(model.parameters(), bucket_bytes=bucket_bytes, comm_dtype=wire)
    forward: nn.Module = model
    if method == 'ddp' and get_world_size() > 1:
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
        if wire is not None:
            ddp.register_comm_hook(None, DDP_COMPRESS_HOOKS[wire])
        forward = ddp

    def backward_and_sync(loss: torch.Tensor) -> float:
        """Backward plus averaging; returns the seconds spent on averaging after the backward ended."""
        if method == 'overlap':
            with overlap.averaging(weight=args.batch):
                loss.backward()
                t = time.perf_counter()
            return time.perf_counter() - t
        loss.backward()
        t = time.perf_counter()
        if method == 'flat':
            sync_gradients(model.parameters(), weight=args.batch, comm_dtype=wire)
        return time.perf_counter() - t

    sync_time = start = cpu_start = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            all_ranks(True)  # a barrier: every rank starts the clock together
            start, cpu_start, sync_time = time.perf_counter(), time.process_time(), 0.0
        optimizer.zero_grad(set_to_none=True)
        loss = (forward(x) - y).pow(2).mean()
        sync_time += backward_and_sync(loss)
        optimizer.step()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    # The all-reduce alone (flat, this run's dtype on the wire): after a barrier, so no rank waits for a slower
    # one's backward.
    alone = 0.0
    for _ in range(args.sync_repeats):
        all_ranks(True)
        t = time.perf_counter()
        sync_gradients(model.parameters(), weight=args.batch, comm_dtype=wire)
        alone += time.perf_counter() - t
    overlap.stop()
    return {'elapsed': elapsed, 'cpu': cpu, 'sync': sync_time, 'alone': alone / args.sync_repeats}


def throughput_measure(world_size: int, sync: str, args: argparse.Namespace) -> dict[str, float]:
    """One run of ``world_size`` ranks: samples/s (wall, per rank CPU second), step and sync times in ms."""
    res = run_group(throughput_rank, world_size, argparse.Namespace(**{**vars(args), 'sync': sync}))
    samples = world_size * args.batch * args.steps
    elapsed = max(r['elapsed'] for r in res)
    return {
        'rate': samples / elapsed,
        # Per rank CPU second: what N ranks give when each has a core of its own (steadier on a busy machine).
        'cpu_rate': samples / (sum(r['cpu'] for r in res) / world_size),
        'step_ms': 1e3 * elapsed / args.steps,
        'sync_ms': 1e3 * sum(r['sync'] for r in res) / world_size / args.steps,
        'alone_ms': 1e3 * sum(r['alone'] for r in res) / world_size,
    }


def throughput_rows(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Runs of 1 rank and of N ranks with each ``--sync`` interleaved ``--rounds`` times; the median of each figure."""
    n_params = sum(p.numel() for p in mlp().parameters())
    setups = [(1, 'none')] + [(args.ranks, sync) for sync in args.sync]
    runs: dict[tuple[int, str], list[dict[str, float]]] = {s: [] for s in setups}
    for _ in range(args.rounds):
        for world_size, sync in setups:
            runs[world_size, sync].append(throughput_measure(world_size, sync, args))
    med = {s: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for s, rs in runs.items()}
    base = med[1, 'none']
    wires_shown: set[str | None] = set()
    rows = [(f'{LAYERS} x {HIDDEN} MLP ({n_params / 1e6:.2f} M params), batch {args.batch}/rank, {args.threads} '
             f'thread(s)/rank, buckets {args.bucket_mb} MB, {args.steps} steps, median of {args.rounds}', 'value')]  # fmt: skip
    for (world_size, sync), m in med.items():
        name = '1 rank' if world_size == 1 else f'{world_size} ranks, {sync}'
        rows += [
            (f'{name}: samples/s, wall clock', f"{m['rate']:.0f} ({m['rate'] / base['rate']:.2f}x)"),
            (f'{name}: samples/s per rank CPU time', f"{m['cpu_rate']:.0f} ({m['cpu_rate'] / base['cpu_rate']:.2f}x)"),
            (f'{name}: step ms / averaging ms after the backward (share)',
             f"{m['step_ms']:.1f} / {m['sync_ms']:.2f} ({100 * m['sync_ms'] / m['step_ms']:.1f}%)"),
        ]  # fmt: skip
        wire = parse_sync(sync)[1] if world_size > 1 else None
        if world_size > 1 and wire not in wires_shown:  # once per dtype on the wire
            wires_shown.add(wire)
            wire_mb = n_params * (2 if wire else 4) / 1e6
            rows.append((f'{world_size} ranks: flat all-reduce alone, {wire or "float32"} ({wire_mb:.1f} MB), ms '
                         f'(share of the {sync} step)',
                         f"{m['alone_ms']:.2f} ({100 * m['alone_ms'] / m['step_ms']:.1f}%)"))  # fmt: skip
    return rows


# ---- assignment: duplicate-sample rate, random vs bins (the coordinator's LearnerGroup on real buffers) ----
def assignment_rows(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Share of the samples a rank trains in a round that another rank trains in the same round
    (``multi_learner_assignment.py`` has the full grid)."""
    from multi_learner_assignment import measure  # deferred: a sibling script, on sys.path when run as one

    rows = []
    for samples, batches in ((2000, 1), (2000, 64), (20000, 64)):
        rates = [measure(assignment, samples, batches) for assignment in ('random', 'bins')]
        rows.append(
            (f'{samples} samples, {batches} batch(es) per round: random / bins', '{:.2%} / {:.2%}'.format(*rates))
        )
    return rows


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    if not rows:
        return
    width = max(len(r[0]) for r in rows)
    print(f'\n{title}\n' + '-' * (width + 30))
    for name, value in rows:
        print(f'{name.ljust(width)} | {value}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--part', choices=('both', 'equivalence', 'throughput', 'assignment'), default='both')
    parser.add_argument('--ranks', type=int, default=2)
    parser.add_argument('--updates', type=int, default=100, help='equivalence: DQN updates')
    parser.add_argument('--joint-batch', type=int, default=64, help='equivalence: samples over all ranks')
    parser.add_argument('--batch', type=int, default=256, help='throughput: samples per rank per step')
    parser.add_argument('--steps', type=int, default=100, help='throughput: timed steps')
    parser.add_argument('--warmup', type=int, default=10, help='throughput: untimed steps first')
    parser.add_argument('--rounds', type=int, default=3, help='throughput: interleaved 1 / N rank runs (median)')
    parser.add_argument('--sync-repeats', type=int, default=10, help='throughput: timed all-reduces alone')
    parser.add_argument('--sync', nargs='+', choices=SYNC_CHOICES, default=['flat', 'overlap'],
                        help='throughput: gradient averaging(s) of the N-rank runs, compared side by side; -bf16 / '
                             '-fp16: the gradients travel as bfloat16 / float16')  # fmt: skip
    parser.add_argument('--bucket-mb', type=float, default=1.0, help='throughput: bucket size (overlap, ddp)')
    parser.add_argument('--threads', type=int, default=1, help='torch threads per rank (1 rank alone too)')
    parser.add_argument('--pin', action='store_true', help='pin rank r to CPU core r (quiet machines only)')
    args = parser.parse_args()
    if args.joint_batch % args.ranks:
        parser.error('--joint-batch must be a multiple of --ranks')
    print(
        f'torch {torch.__version__}, {os.cpu_count()} CPUs, gloo, {args.threads} torch thread(s) per rank, '
        f'load average {os.getloadavg()[0]:.2f}'
    )
    if args.part in ('both', 'equivalence'):
        print_table('Equivalence', equivalence_rows(args))
    if args.part in ('both', 'throughput'):
        print_table('Throughput', throughput_rows(args))
    if args.part in ('both', 'assignment'):
        print_table('Assignment', assignment_rows(args))


if __name__ == '__main__':
    main()
