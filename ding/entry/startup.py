"""Process start-up: size torch's OpenMP pool before torch is imported."""

from __future__ import annotations

import os


def limit_openmp_threads(threads: int | None = None) -> None:
    """Set ``OMP_NUM_THREADS`` before torch is imported (torch sizes its OpenMP pool at import;
    ``torch.set_num_threads`` later does not shrink it). ``threads`` defaults to ``DING_TORCH_THREADS`` or 1, the
    intra-op thread count ding runs with (``ding.torch_utils.configure_torch_threads``); a bigger pool only spins
    and costs ~0.3 s of a CartPole run on 2 cores. An ``OMP_NUM_THREADS`` the user set is kept."""
    if threads is None:
        value = os.environ.get('DING_TORCH_THREADS', '1')
        threads = int(value) if value.isdigit() and int(value) > 0 else 1
    os.environ.setdefault('OMP_NUM_THREADS', str(threads))
