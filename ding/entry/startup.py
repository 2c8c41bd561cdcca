"""Process start-up: import the heavy modules without the cyclic garbage collector re-scanning them."""
from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from typing import Any, NoReturn, Optional


def limit_openmp_threads(threads: Optional[int] = None) -> None:
    """Size torch's OpenMP pool before torch is imported (it is sized at import; ``torch.set_num_threads``
    later does not shrink it). ``threads`` defaults to ``DING_TORCH_THREADS`` or 1, the intra-op thread
    count ding runs with (``ding.torch_utils.configure_torch_threads``); a bigger pool only spins and
    costs ~0.3 s of a CartPole run on 2 cores. An ``OMP_NUM_THREADS`` the user set is kept."""
    if threads is None:
        value = os.environ.get('DING_TORCH_THREADS', '1')
        threads = int(value) if value.isdigit() and int(value) > 0 else 1
    os.environ.setdefault('OMP_NUM_THREADS', str(threads))


def import_for_run(module: str, name: Optional[str] = None) -> Any:
    """``from module import name`` (or ``import module`` when ``name`` is None) for a process about to run
    a pipeline or worker.

    Importing torch and the pipeline creates most of the ~200k objects a run keeps for its whole life;
    while they are created, the collector runs several full collections over them (~0.15 s of a CartPole
    run). So the collector is paused during the import, and what exists afterwards is moved to the
    permanent generation (``gc.freeze``): later collections only look at objects made by the run itself.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        imported = importlib.import_module(module)
        return imported if name is None else getattr(imported, name)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def exit_now(code: int) -> NoReturn:
    """End a finished ``ding`` process: run the ``atexit`` handlers (logging, multiprocessing, ...), flush the
    standard streams, and leave without the interpreter's teardown of every module and object, which costs
    0.3-0.5 s once torch is loaded. Only for process entry points whose work is done and closed: anything
    left unclosed is not finalised."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 -- a closed or broken stream must not keep the process alive
                pass
        os._exit(code)
