"""The logging hooks: ``log_show`` (the scalar table, tensorboard, hook timings) and ``log_reduce`` (averages
the log values over the ranks of a distributed run)."""

from __future__ import annotations

import time
from numbers import Real
from typing import Any

import numpy as np

from ding.utils.log_helper import pretty_table
from ding.utils.pytorch_ddp_dist_helper import allreduce_data, get_world_size

from .hook_base import LearnerHook, iterations_done, positive_int, register_learner_hook


class LogShowHook(LearnerHook):
    """Every ``ext_args.freq`` completed iterations, log the averages since the last show.

    Writes a text table of the averages of the policy's ``monitor_vars()`` (then of any other
    numeric scalar logged, e.g. ``data_time`` in ``start()``), a table of the time each hook took,
    and the same values to tensorboard: ``{instance}_iter/{var}`` (x = iterations),
    ``{instance}_step/{var}`` (x = collector env steps), ``{instance}_hook_time/{hook}`` (ms per
    call), histograms of ``[histogram]`` keys and ``add_scalars`` of ``[scalars]`` keys. At
    ``after_run`` it shows whatever is pending.
    """

    def __init__(
        self,
        name: str,
        priority: float,
        position: str | None = None,
        ext_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, position=position, ext_args=ext_args, **kwargs)
        self._freq = positive_int(self._ext_args.get('freq', 1), f"learner hook '{self.name}': ext_args.freq")

    @property
    def freq(self) -> int:
        return self._freq

    def __call__(self, engine: Any) -> None:
        # Runs every iteration: keep it to a few dict operations unless a show is due.
        buffers = engine.log_buffer
        if engine.rank == 0:
            monitor = engine.monitor
            monitor.update(buffers['scalar'])
            done = iterations_done(engine)
            if self._position == 'after_iter':
                show = done % self._freq == 0
            else:
                show = monitor.iters > 0
            if show:
                self._show(engine, done)
        for buf in buffers.values():
            if buf:
                buf.clear()

    def _show(self, engine: Any, done: int) -> None:
        call_start = time.perf_counter()
        monitor = engine.monitor
        names = list(engine.policy.monitor_vars())
        # Then whatever else was reported: data_time in start(), values custom hooks put in the buffer.
        names += [k for k in monitor.sums if k not in names]
        averages = monitor.averages(names)
        elapsed = max(time.perf_counter() - monitor.since, 1e-9)
        instance = engine.instance_name
        title = (
            f'=== {instance} iteration {done}: averages over {monitor.iters} iterations '
            f'({monitor.iters / elapsed:.1f} it/s) ==='
        )
        hook_rows = _hook_rows(engine, elapsed)
        text = pretty_table(averages, title)
        if hook_rows:
            text += '\n' + _hook_table(hook_rows)
        engine.info(text)

        tb = engine.tb_logger
        if tb is not None:
            step = engine.collector_envstep
            for k, v in averages.items():
                tb.add_scalar(f'{instance}_iter/{k}', v, done)
                tb.add_scalar(f'{instance}_step/{k}', v, step)
            for row in hook_rows:
                tb.add_scalar(f'{instance}_hook_time/{row[0]}', row[3], done)
            for k, v in engine.log_buffer['scalars'].items():
                if isinstance(v, dict):
                    tb.add_scalars(f'{instance}_iter/{k}', v, done)
            histograms = engine.log_buffer['histogram']
            if histograms:
                for k, v in histograms.items():
                    tb.add_histogram(f'{instance}/{k}', np.asarray(v, dtype=np.float64), done)
        # The next window starts with this call, so the time of this show (tensorboard writes, the
        # writer's creation) is counted in the next table rather than lost.
        monitor.clear(since=call_start)
        hook_time = getattr(engine, 'hook_time', None)
        if hook_time is not None:
            hook_time.clear()


class LogReduceHook(LearnerHook):
    """Average the numeric log-buffer values over all ranks (one all-reduce per iteration).

    Runs only when ``torch.distributed`` is initialised (with world size 1 the reduce changes
    nothing); otherwise it does nothing. Histogram values are left per-rank. Every rank must
    report the same keys.
    """

    def __call__(self, engine: Any) -> None:
        if get_world_size() == 1:
            return
        buffers = engine.log_buffer
        slots: dict[str, tuple[Any, str, Any]] = {}  # name -> (buffer, key, sub-key or None)
        for kind in ('scalar', 'scalars'):
            buf = buffers[kind]
            for k, v in buf.items():
                if isinstance(v, dict):
                    slots.update({f'{kind}\0{k}\0{sk}': (buf, k, sk) for sk in v if _is_number(v[sk])})
                elif _is_number(v):
                    slots[f'{kind}\0{k}'] = (buf, k, None)
        if not slots:
            return
        values = {name: float(b[k] if sk is None else b[k][sk]) for name, (b, k, sk) in slots.items()}
        for name, v in allreduce_data(values, op='mean').items():
            b, k, sk = slots[name]
            if sk is None:
                b[k] = v
            else:
                b[k][sk] = v


def _is_number(v: Any) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _hook_rows(engine: Any, elapsed: float) -> list[tuple]:
    """(name, position, calls, avg ms, total ms, share of wall time %) per hook since the last show."""
    hook_time = getattr(engine, 'hook_time', None) or {}
    rows = []
    for name, (total, calls, position) in hook_time.items():
        if calls:
            rows.append((name, position, calls, total * 1e3 / calls, total * 1e3, 100.0 * total / elapsed))
    return rows


def _hook_table(rows: list[tuple]) -> str:
    head = ('hook', 'position', 'calls', 'avg ms', 'total ms', 'share %')
    cells = [head] + [(r[0], r[1], str(r[2]), f'{r[3]:.4f}', f'{r[4]:.3f}', f'{r[5]:.2f}') for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = [' | '.join(c[i].ljust(widths[i]) for i in range(len(head))) for c in cells]
    rule = '-' * len(lines[0])
    return '\n'.join(['hook time since last show', rule, lines[0], rule] + lines[1:] + [rule])


register_learner_hook('log_show', LogShowHook)
register_learner_hook('log_reduce', LogReduceHook)
