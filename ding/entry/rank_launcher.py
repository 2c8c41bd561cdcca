"""``ding ... --nproc N``: start N rank processes of one pipeline, supervise them, restart them after a failure.

Each rank is the same ``ding`` command with ``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` / ``MASTER_PORT`` in its
environment (what ``torchrun`` sets), so the ranks join one process group over ``env://`` on 127.0.0.1. The
launcher imports no torch: it only starts, watches and stops processes.

- Ctrl-C / SIGTERM: forwarded to every rank once (rank 0 writes its interrupt checkpoint), then whatever is left
  after ``grace_s`` is killed; no rank outlives the launcher (each one also dies with it: ``ding.entry.lifeline``).
- A rank that dies (a signal, or an exit code other than 0, 2 = bad input, 130 = interrupted): the other ranks are
  stopped (they may be blocked in a collective) and all of them start again from the newest valid checkpoint of
  ``./{exp_name}/ckpt``, at most ``max_restarts`` times; with ``min_nproc`` < N each restart drops one rank, down
  to ``min_nproc``. The launcher says which checkpoint and how many iterations are done again.

Rank 0 tells the launcher its run directory and iteration through a small progress file (``RankProgressFile``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ding.config.parallel_system import find_free_port

from .lifeline import launcher_env

PROGRESS_ENV = 'DING_RANK_PROGRESS'
"""Environment variable naming the file where rank 0 keeps its run directory and train iteration."""

NO_RESTART_CODES = (0, 2, 130)  # done, bad input (the same again on a restart), interrupted
_ITER_FIELD = 21  # bytes of the iteration record at the start of the progress file: 20 digits and a newline


class RankProgressFile:
    """Rank 0's side of the progress file: its run directory (written once) and its iteration (every loop).

    The iteration is a fixed-width record overwritten in place (one ``pwrite``, no fsync): cheap enough for
    every loop, and never half-written for a reader that looks after the writer has gone."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    @classmethod
    def from_environment(cls) -> RankProgressFile | None:
        path = os.environ.get(PROGRESS_ENV)
        return cls(path) if path else None

    def start(self, exp_name: str, train_iter: int) -> None:
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, _iter_record(train_iter) + exp_name.encode(), 0)

    def update(self, train_iter: int) -> None:
        os.pwrite(self._fd, _iter_record(train_iter), 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _iter_record(train_iter: int) -> bytes:
    return f'{int(train_iter):20d}\n'.encode()


def read_rank_progress(path: str) -> tuple[str, int] | None:
    """``(exp_name, train_iter)`` from a progress file; None when rank 0 wrote none (it failed before)."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError:
        return None
    if len(data) <= _ITER_FIELD:
        return None
    try:
        return data[_ITER_FIELD:].decode(), int(data[:_ITER_FIELD])
    except (UnicodeDecodeError, ValueError):
        return None


@dataclass
class Failure:
    rank: int
    code: int

    def describe(self) -> str:
        if self.code < 0:
            try:
                return f'rank {self.rank} was killed by {signal.Signals(-self.code).name}'
            except ValueError:
                return f'rank {self.rank} was killed by signal {-self.code}'
        return f'rank {self.rank} exited with code {self.code}'


class RankProcesses:
    """N rank processes of one attempt: started together, polled, stopped together."""

    def __init__(self, command: Sequence[str], nproc: int, progress_path: str) -> None:
        port = find_free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            for rank in range(nproc):
                env = launcher_env(dict(os.environ))
                env.update(
                    RANK=str(rank),
                    LOCAL_RANK=str(rank),
                    WORLD_SIZE=str(nproc),
                    LOCAL_WORLD_SIZE=str(nproc),
                    MASTER_ADDR='127.0.0.1',
                    MASTER_PORT=str(port),
                )
                env[PROGRESS_ENV] = progress_path
                # Its own session: a terminal's Ctrl-C reaches the launcher only, which forwards it once.
                self.procs.append(subprocess.Popen(list(command), env=env, start_new_session=True))
        except BaseException:
            self.stop(signal.SIGKILL, 0.0)
            raise

    def failure(self) -> Failure | None:
        """The first rank (lowest number) that ended badly, killed by a signal first."""
        ended = [(rank, p.returncode) for rank, p in enumerate(self.procs) if p.poll() is not None]
        bad = [Failure(rank, code) for rank, code in ended if code != 0]
        bad.sort(key=lambda f: (f.code >= 0, f.rank))
        return bad[0] if bad else None

    def all_done(self) -> bool:
        return all(p.poll() == 0 for p in self.procs)

    def any_done(self) -> bool:
        return any(p.poll() == 0 for p in self.procs)

    def signal_all(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass

    def interrupt(self, sig: int, grace_s: float) -> None:
        """Ctrl-C / SIGTERM: ``sig`` to rank 0 alone, which writes its interrupt checkpoint once its current
        collective is done (sent to every rank, one of them could leave first and turn rank 0's collective into an
        error instead); the others, blocked in their next collective or failed, are stopped afterwards."""
        main = self.procs[0]
        if main.poll() is None:
            main.send_signal(sig)
            try:
                main.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.stop(signal.SIGTERM, grace_s)

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 10.0) -> None:
        """Send ``sig`` to the ranks still running, wait up to ``grace_s``, then kill the rest."""
        self.signal_all(sig)
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class _Signals:
    """Records SIGINT / SIGTERM while the ranks run, instead of raising in the middle of the supervision."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._record)
        return self

    def _record(self, signum: int, frame: object) -> None:
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def say(msg: str) -> None:
    print(f'[ding] {msg}', file=sys.stderr, flush=True)


def launch_ranks(
    rank_argv: Callable[[str | None, str | None], list[str]],
    nproc: int,
    max_restarts: int = 3,
    min_nproc: int | None = None,
    grace_s: float = 10.0,
    poll_s: float = 0.05,
) -> int:
    """Run the pipeline on ``nproc`` rank processes until it ends; return the exit code for ``ding``.

    ``rank_argv(exp_name, resume)`` gives the ``ding`` arguments of every rank: ``(None, None)`` for the first
    start, then the run directory rank 0 used and the checkpoint to resume from (or 'never') for a restart."""
    if nproc < 1:
        raise ValueError(f'--nproc must be >= 1, got {nproc}')
    min_nproc = nproc if min_nproc is None else min_nproc
    if not 1 <= min_nproc <= nproc:
        raise ValueError(f'--min-nproc must be between 1 and --nproc ({nproc}), got {min_nproc}')
    if max_restarts < 0:
        raise ValueError(f'--max-restarts must be >= 0, got {max_restarts}')
    exp_name: str | None = None
    resume: str | None = None
    restarts = 0
    with tempfile.TemporaryDirectory(prefix='ding_ranks_') as tmp, _Signals() as signals:
        while True:
            progress = os.path.join(tmp, f'progress_{restarts}')
            command = [sys.executable, '-m', 'ding.entry.cli', *rank_argv(exp_name, resume)]
            group = RankProcesses(command, nproc, progress)
            failure = _supervise(group, signals, grace_s, poll_s)
            if signals.received is not None:
                name = signal.Signals(signals.received).name
                say(f'{name}: stopping the {nproc} ranks')
                group.interrupt(signals.received, grace_s)
                return 130 if signals.received == signal.SIGINT else 128 + signals.received
            if failure is None:
                return 0
            say(f'{failure.describe()}; stopping the other ranks')
            group.stop(signal.SIGTERM, grace_s)
            if failure.code in NO_RESTART_CODES or restarts >= max_restarts:
                if failure.code not in NO_RESTART_CODES:
                    say(f'giving up after {restarts} restart(s) (--max-restarts {max_restarts})')
                return failure.code if failure.code > 0 else 1
            restarts += 1
            reached = read_rank_progress(progress)
            if reached is not None:
                exp_name = reached[0]
            nproc = max(min_nproc, nproc - 1) if min_nproc < nproc else nproc
            resume = _restart_point(exp_name, reached, nproc, restarts, max_restarts)


def _supervise(group: RankProcesses, signals: _Signals, grace_s: float, poll_s: float) -> Failure | None:
    """Wait until every rank has ended well, one has failed, or a signal came. Once one rank has ended well the
    others get ``grace_s`` more seconds (they leave the same loop); a rank still running then counts as failed."""
    finished_at: float | None = None
    while signals.received is None:
        failure = group.failure()
        if failure is not None:
            return failure
        if group.all_done():
            return None
        if finished_at is None and group.any_done():
            finished_at = time.monotonic()
        if finished_at is not None and time.monotonic() - finished_at > 6 * grace_s:
            stuck = [rank for rank, p in enumerate(group.procs) if p.poll() is None]
            say(f'rank(s) {stuck} still running long after the others finished; stopping them')
            group.stop(signal.SIGTERM, grace_s)
            # Rank 0 done: the run is (its summary, checkpoints); else the run did not finish.
            return Failure(0, 1) if 0 in stuck else None
        time.sleep(poll_s)
    return None


def _restart_point(
    exp_name: str | None, reached: tuple[str, int] | None, nproc: int, restarts: int, max_restarts: int
) -> str:
    """The checkpoint the next attempt resumes from ('never' when there is none), said with what is repeated."""
    from ding.utils.checkpoint import read_manifest  # deferred: imports torch; needed only on a restart
    from ding.worker.resume_choice import experiment_ckpt_dir, newest_valid_checkpoint  # deferred: as above

    attempt = f'restart {restarts} of {max_restarts}'
    path = newest_valid_checkpoint(experiment_ckpt_dir(exp_name)) if exp_name else None
    if path is None:
        say(f'{attempt}: no valid checkpoint yet; starting {nproc} ranks afresh')
        return 'never'
    ckpt_iter = read_manifest(path).get('last_iter')
    repeated = ''
    if reached is not None and isinstance(ckpt_iter, int):
        repeated = f'; iterations {ckpt_iter}..{reached[1]} are done again ({max(0, reached[1] - ckpt_iter)} repeated)'
    say(f'{attempt}: starting {nproc} ranks from {path} (iteration {ckpt_iter}){repeated}')
    return path


__all__ = ['PROGRESS_ENV', 'RankProgressFile', 'read_rank_progress', 'launch_ranks']
