"""A serial or async pipeline on several processes, seen from one rank: joining the group, and the decisions
every rank must take together.

Every rank collects its own data and trains; the policies all-reduce their gradients inside each update, so
every rank must run the same number of updates. A decision that could differ between ranks (stop: solved,
terminated, a limit reached; train: every buffer holds a batch) is therefore agreed with one small all-reduce
(``ding.utils.pytorch_ddp_dist_helper``) before it is acted on. Rank 0 alone evaluates, writes checkpoints,
the compiled config and the summary; env steps of the summary and of the limits are summed over the ranks.
With one process (no group) every method returns the local value and no collective runs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ding.utils.pytorch_ddp_dist_helper import (
    all_ranks,
    allreduce_data,
    any_rank,
    broadcast,
    dist_finalize,
    dist_init,
    get_rank,
    get_world_size,
)

RANK_TIMEOUT_S = 1800.0
"""Bound of a rank's collectives: rank 0 evaluates (or waits in a pause) while the others wait for it; a rank
that died is noticed sooner by the launcher, which stops the group."""


def join_rank_group_from_environment(cuda: bool) -> RankGroup:
    """Join the process group ``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` / ``MASTER_PORT`` describe (as torchrun
    or ``ding --nproc`` set them): nccl when ``cuda`` is asked for and available, else gloo. Ranks other than 0
    keep the console quiet (their logs go to their own files)."""
    backend = 'nccl' if cuda and torch.cuda.is_available() else 'gloo'
    rank, world_size = dist_init(backend, None, timeout=RANK_TIMEOUT_S)
    if rank > 0:
        os.environ.setdefault('DING_QUIET', '1')
        os.environ.setdefault('DING_PROGRESS', '0')
    return RankGroup(rank, world_size, backend)


def leave_rank_group() -> None:
    """Leave the process group (nothing happens when there is none)."""
    dist_finalize()


def stop_reason(envstep: int, train_iter: int, max_env_step: int | None, max_train_iter: int | None) -> str | None:
    """Why a pipeline stops after this loop ('max_env_step reached', 'max_train_iter reached'), or None.
    ``envstep`` is the run's total (summed over the ranks); a limit of None is no limit."""
    if max_env_step is not None and envstep >= max_env_step:
        return 'max_env_step reached'
    if max_train_iter is not None and train_iter >= max_train_iter:
        return 'max_train_iter reached'
    return None


@dataclass(frozen=True)
class RankGroup:
    """This process's place in the group (rank 0 of 1 without one) and the agreements the loops make."""

    rank: int = 0
    world_size: int = 1
    backend: str = ''

    @classmethod
    def current(cls) -> RankGroup:
        """The group this process has joined, or rank 0 of 1."""
        size = get_world_size()
        return cls(get_rank(), size, dist.get_backend() if size > 1 else '')

    @property
    def is_main(self) -> bool:
        """Rank 0: evaluates, writes checkpoints, the compiled config and the summary."""
        return self.rank == 0

    @property
    def several(self) -> bool:
        return self.world_size > 1

    def describe(self, exp_name: str) -> str:
        others = f'; the other ranks log to ./{exp_name}/log/rank<k>/' if self.several else ''
        return (
            f'{self.world_size} ranks ({self.backend}): each collects its own data, gradients are averaged every '
            f'update, rank 0 evaluates and saves{others}'
        )

    def log_exp_name(self, exp_name: str) -> str:
        """The directory a rank's workers use as their ``exp_name``: the run's for rank 0, ``{exp_name}/log/rank<k>``
        for the others (so that no file is written by two ranks)."""
        return exp_name if self.rank == 0 else os.path.join(exp_name, 'log', f'rank{self.rank}')

    # ---- agreements -------------------------------------------------------------------------------------
    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is True on one (stop: solved, terminated)."""
        return any_rank(flag) if self.several else bool(flag)

    def all(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is True on all (train: every rank has a batch)."""
        return all_ranks(flag) if self.several else bool(flag)

    def total(self, value: int) -> int:
        """``value`` summed over the ranks (env steps)."""
        if not self.several:
            return int(value)
        return int(round(allreduce_data({'value': float(value)}, 'sum')['value']))

    def smallest(self, value: int) -> int:
        """The smallest ``value`` over the ranks (e.g. a rollout length every rank can train on)."""
        if not self.several:
            return int(value)
        return int(allreduce_data({'value': float(value)}, 'min')['value'])

    def share_texts(self, *texts: str) -> list[str]:
        """Rank 0's ``texts`` on every rank (e.g. the run directory it chose, the checkpoint it resumes from)."""
        if not self.several:
            return list(texts)
        device = torch.device('cuda', torch.cuda.current_device()) if self.backend == 'nccl' else torch.device('cpu')
        encoded = [t.encode() for t in texts]
        lengths = torch.tensor([len(b) for b in encoded], dtype=torch.int64, device=device)
        broadcast(lengths, 0)
        sizes = [int(n) for n in lengths.tolist()]
        payload = torch.zeros(sum(sizes), dtype=torch.uint8, device=device)
        if self.is_main and sizes and sum(sizes):
            payload.copy_(torch.frombuffer(bytearray(b''.join(encoded)), dtype=torch.uint8))
        broadcast(payload, 0)
        data = bytes(payload.cpu().tolist())
        out, offset = [], 0
        for n in sizes:
            out.append(data[offset : offset + n].decode())
            offset += n
        return out


def parameter_digest(state: Mapping[str, Any]) -> str:
    """A short sha256 of every tensor of ``state`` (a policy's ``state_dict``, nested dicts included), so the
    ranks' logs show whether their parameters are identical."""
    digest = hashlib.sha256()

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            digest.update(prefix.encode())
            digest.update(value.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(value, Mapping):
            for key in sorted(value, key=str):
                add(f'{prefix}/{key}', value[key])

    add('', state.get('model', state))
    return digest.hexdigest()[:16]


__all__ = [
    'RANK_TIMEOUT_S',
    'RankGroup',
    'join_rank_group_from_environment',
    'leave_rank_group',
    'parameter_digest',
    'stop_reason',
]
