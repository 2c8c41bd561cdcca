"""Process start-up: import the heavy modules without the cyclic garbage collector re-scanning them."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

# Shared libraries whose load-time code is worth releasing (see release_load_time_code).
LOAD_TIME_CODE_LIBRARIES = ('libtorch_cpu.so',)
_MADV_DONTNEED = 4


def limit_openmp_threads(threads: int | None = None) -> None:
    """Size torch's OpenMP pool before torch is imported (it is sized at import; ``torch.set_num_threads``
    later does not shrink it). ``threads`` defaults to ``DING_TORCH_THREADS`` or 1, the intra-op thread
    count ding runs with (``ding.torch_utils.configure_torch_threads``); a bigger pool only spins and
    costs ~0.3 s of a CartPole run on 2 cores. An ``OMP_NUM_THREADS`` the user set is kept."""
    if threads is None:
        value = os.environ.get('DING_TORCH_THREADS', '1')
        threads = int(value) if value.isdigit() and int(value) > 0 else 1
    os.environ.setdefault('OMP_NUM_THREADS', str(threads))


def import_for_run(module: str, name: str | None = None) -> Any:
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
        if 'torch' in sys.modules:
            release_load_time_code()


def releasable_code_ranges(smaps: str, libraries: Iterable[str] = LOAD_TIME_CODE_LIBRARIES) -> list[tuple[int, int]]:
    """``(start, end)`` of the executable mappings of ``libraries`` in a ``/proc/PID/smaps`` text that are
    safe to drop: read-only (``r-xp``) and without a single private, modified page (``Anonymous: 0 kB``),
    so every page can be read back from the file unchanged."""
    ranges: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for line in smaps.splitlines():
        fields = line.split()
        if not fields:
            continue
        if '-' in fields[0] and len(fields) >= 5 and not fields[0].endswith(':'):
            current = None
            if len(fields) >= 6 and fields[1] == 'r-xp' and os.path.basename(fields[5]) in libraries:
                start, end = (int(x, 16) for x in fields[0].split('-'))
                current = (start, end)
                ranges.append(current)
        elif current is not None and fields[0] == 'Anonymous:' and fields[1] != '0':
            ranges.remove(current)
            current = None
    return ranges


def release_load_time_code(libraries: Iterable[str] = LOAD_TIME_CODE_LIBRARIES) -> int:
    """Drop the resident code pages of torch's shared library once it has loaded; returns the bytes of
    address space released (0 when nothing was done).

    Loading libtorch runs its operator-registration initialisers, spread over the whole code segment; the
    kernel maps 64 KB around each page it faults in, so ~45 MB of code that never runs again stays in the
    process's resident set. ``madvise(MADV_DONTNEED)`` on that unmodified, read-only file mapping removes
    those pages from this process only: they stay in the page cache (shared with other processes,
    reclaimable), and the code a run does execute is faulted back in on first use (~15 MB for a CartPole
    run, a few thousand minor faults). Linux only; ``DING_KEEP_LOAD_CODE=1`` turns it off."""
    if os.environ.get('DING_KEEP_LOAD_CODE', '') not in ('', '0') or not sys.platform.startswith('linux'):
        return 0
    try:
        import ctypes

        with open('/proc/self/smaps') as f:
            ranges = releasable_code_ranges(f.read(), libraries)
        if not ranges:
            return 0
        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return sum(end - start for start, end in ranges if madvise(start, end - start, _MADV_DONTNEED) == 0)
    except (OSError, AttributeError, ValueError):  # no /proc, no madvise symbol: keep the pages
        return 0


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
