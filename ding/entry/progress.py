"""The progress bar and the one-line run summary the pipelines print on stderr."""

from __future__ import annotations

import os
import sys
import time


class RunProgress:
    """A tqdm bar over env steps showing iterations, the last eval return and the rate.

    Disabled with ``DING_PROGRESS=0`` or ``enabled=False`` (ranks other than 0); updates are rate-limited by
    tqdm (``mininterval``) so calling :meth:`update` once per collect costs next to nothing.
    """

    def __init__(self, exp_name: str, max_env_step: int | None = None, enabled: bool = True) -> None:
        self.exp_name = exp_name
        self.start_time = time.perf_counter()
        self.last_eval_return: float | None = None
        self._bar = None
        if enabled and os.environ.get('DING_PROGRESS', '1') != '0':
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

    def record_eval(self, eval_return: float) -> None:
        self.last_eval_return = eval_return

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start_time

    def close(
        self,
        solved: bool,
        envstep: int,
        train_iter: int,
        best_return: float | None,
        stop_value: float | None,
        reason: str,
    ) -> str:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        best = 'n/a' if best_return is None or best_return == float('-inf') else f'{best_return:.2f}'
        status = 'SOLVED' if solved else f'not solved ({reason})'
        line = (
            f'[ding] {self.exp_name}: {status} | stop value {stop_value} | env steps {envstep} | '
            f'train iters {train_iter} | wall {self.elapsed:.1f}s | best eval return {best}'
        )
        print(line, file=sys.stderr, flush=True)
        return line
