"""What a run shows while it trains and leaves when it ends: the progress bar, one line per evaluation, the
evaluation record ``log/eval.jsonl`` and the summary (one line on stderr, ``summary.json``)."""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from typing import Any

from ding.utils.atomic_file import append_line, write_atomic
from ding.utils.console import is_quiet
from ding.utils.time_helper import mark_run_end, run_origin

from .run_records import EVAL_LOG, SUMMARY_FILE


class RunProgress:
    """A tqdm bar over env steps showing iterations, the last eval return and (with an env-step limit) the ETA.

    ``enabled=False`` (ranks other than 0) shows and writes nothing. The bar is left out with ``DING_PROGRESS=0``
    or at the quiet console level; updates are rate-limited by tqdm (``mininterval``) so calling :meth:`update`
    once per collect costs next to nothing. The run's wall time counts from ``ding.utils.time_helper.run_origin``
    (the process start); its set-up is the part before this object was built, when the pipeline starts its loop.
    """

    def __init__(self, exp_name: str, max_env_step: int | None = None, enabled: bool = True) -> None:
        self.exp_name = exp_name
        self.enabled = enabled
        self.origin = run_origin()
        self.loop_start = time.time()
        self.start_time = time.perf_counter()
        self.last_eval_return: float | None = None
        self.best_eval_return: float | None = None
        self.evaluations = 0
        self._bar: Any = None
        if enabled and os.environ.get('DING_PROGRESS', '1') != '0' and not is_quiet():
            from tqdm import tqdm  # deferred: loaded only when the bar is shown

            total = max_env_step if max_env_step is not None and max_env_step < int(1e9) else None
            self._bar = tqdm(
                total=total,
                desc=exp_name,
                unit='step',
                file=sys.stderr,
                mininterval=0.5,
                dynamic_ncols=True,
                leave=False,
            )
        self._shown_steps = 0

    def update(self, envstep: int, train_iter: int) -> None:
        if self._bar is None:
            return
        self._bar.update(envstep - self._shown_steps)
        self._shown_steps = envstep
        ret = '-' if self.last_eval_return is None else f'{self.last_eval_return:.1f}'
        self._bar.set_postfix_str(f'iter={train_iter} eval_return={ret}', refresh=False)

    def record_eval(self, eval_return: float, envstep: int, train_iter: int) -> None:
        """An evaluation ended: one line on the console, one record in ``log/eval.jsonl``."""
        self.last_eval_return = eval_return
        if self.best_eval_return is None or eval_return > self.best_eval_return:
            self.best_eval_return = eval_return
        self.evaluations += 1
        if not self.enabled:
            return
        now = time.time()
        record = {
            'train_iter': int(train_iter),
            'env_step': int(envstep),
            'eval_return': float(eval_return),
            'wall_s': round(now - self.origin, 3),
            'time': round(now, 3),
        }
        path = os.path.join('.', self.exp_name, EVAL_LOG)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        append_line(path, json.dumps(record))
        if not is_quiet():
            self._write(
                f'[eval] {self.exp_name}: return {eval_return:.2f} (best {self.best_eval_return:.2f}) at env step '
                f'{envstep}, iteration {train_iter}'
            )

    def _write(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)  # above the bar, which is drawn again below it
        else:
            print(line, file=sys.stderr, flush=True)

    @property
    def elapsed(self) -> float:
        """Seconds since the run's origin (the process start): the summary's wall time."""
        return time.time() - self.origin

    @property
    def setup_time(self) -> float:
        """Seconds from the origin to the start of the training loop (imports, envs, policy, workers)."""
        return max(self.loop_start - self.origin, 0.0)

    def best_checkpoint(self) -> str | None:
        """The newest ``ckpt_best`` checkpoint of the run directory (any learner's), None when there is none."""
        found = [
            p
            for p in glob.glob(os.path.join('.', self.exp_name, 'ckpt*', 'ckpt_best.*'))
            if not p.endswith('.manifest.json')
        ]
        return max(found, key=os.path.getmtime) if found else None

    def close(
        self,
        solved: bool,
        envstep: int,
        train_iter: int,
        best_return: float | None,
        stop_value: float | None,
        reason: str,
        seed: int | None = None,
    ) -> str:
        """Print the summary line once and write ``summary.json``; return the line."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        end = time.time()
        mark_run_end(end)
        if best_return is None or best_return == float('-inf'):
            best_return = self.best_eval_return
        # Rounded once: the line and summary.json show the same numbers (2.0501 would print 2.1 and be stored as
        # 2.05, which prints 2.0).
        wall, setup = round(end - self.origin, 3), round(self.setup_time, 3)
        best = 'n/a' if best_return is None else f'{best_return:.2f}'
        checkpoint = self.best_checkpoint()
        status = 'SOLVED' if solved else f'not solved ({reason})'
        line = (
            f'[ding] {self.exp_name}: {status} | stop value {stop_value} | env steps {envstep} | '
            f'train iters {train_iter} | wall {wall:.1f}s (set-up {setup:.1f}s) | '
            + (f'best checkpoint {checkpoint} | ' if checkpoint else '')
            + f'best eval return {best}'
        )
        summary = {
            'exp_name': self.exp_name,
            'seed': seed,
            'solved': bool(solved),
            'reason': 'solved' if solved else reason,
            'stop_value': stop_value,
            'env_steps': int(envstep),
            'train_iters': int(train_iter),
            'evaluations': self.evaluations,
            'best_eval_return': best_return,
            'last_eval_return': self.last_eval_return,
            'best_checkpoint': checkpoint,
            'wall_s': wall,
            'setup_s': setup,
            'started': round(self.origin, 3),
            'ended': round(end, 3),
        }
        if self.enabled:
            print(line, file=sys.stderr, flush=True)
            path = os.path.join('.', self.exp_name, SUMMARY_FILE)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                write_atomic(path, (json.dumps(summary, indent=1) + '\n').encode('utf-8'))
            except OSError as exc:  # the run is over: say what is missing rather than fail its end
                print(f'ding: WARNING: cannot write {path} ({exc.strerror or exc})', file=sys.stderr, flush=True)
        return line
