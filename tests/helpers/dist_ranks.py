"""Running a function in several rank processes of one torch.distributed group on 127.0.0.1."""

import json
import multiprocessing as mp
import os
from collections.abc import Callable
from typing import Any

from ding.config.parallel import find_free_port


def run_ranks(
    target: Callable[..., None], out_dir: str, world_size: int = 2, timeout: float = 60.0, args: tuple = ()
) -> list[Any]:
    """Run ``target(rank, port, out_dir, *args)`` in ``world_size`` forked processes (a fork starts in
    milliseconds; torch is already imported) and return what each rank wrote to ``out_dir/rank<r>.json``.

    ``port`` is a free port for ``tcp://127.0.0.1:<port>``. Every process is stopped even when one fails.
    """
    port = find_free_port()
    ctx = mp.get_context('fork')
    procs = [ctx.Process(target=target, args=(r, port, out_dir, *args)) for r in range(world_size)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        assert [p.exitcode for p in procs] == [0] * world_size, 'a rank process failed or hung (see its stderr)'
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    results = []
    for r in range(world_size):
        with open(os.path.join(out_dir, f'rank{r}.json')) as f:
            results.append(json.load(f))
    return results


def write_result(out_dir: str, rank: int, result: Any) -> None:
    """What ``run_ranks`` reads back: ``result`` as JSON in ``out_dir/rank<rank>.json``."""
    with open(os.path.join(out_dir, f'rank{rank}.json'), 'w') as f:
        json.dump(result, f)
