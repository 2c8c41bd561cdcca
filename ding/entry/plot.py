"""``ding plot EXP_DIR [EXP_DIR ...] -o curves.png``: learning curves of runs from their ``log/eval.jsonl``.

Two panels, eval return against env steps and against wall time (``wall_s``: seconds since the run's process
started). Runs whose directories differ only by their ``_seedN`` suffix are seeds of one config: each seed thin,
their mean bold with the min-max band where every seed has data. Needs matplotlib (``pip install 'ding[plot]'``). Exit status: 0 written, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from .run_records import RunRecordError, config_label, read_evals

FIGURE_SIZE = (10.0, 4.0)  # inches; times --dpi gives the picture's size in pixels
DEFAULT_DPI = 80


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='ding plot', description='Plot the learning curves of runs.')
    p.add_argument('exp_dirs', nargs='+', metavar='EXP_DIR', help='run directories (./EXP_NAME)')
    p.add_argument('-o', '--output', default='curves.png', help='the picture to write (default curves.png)')
    p.add_argument('--dpi', type=int, default=DEFAULT_DPI, help=f'pixels per inch (default {DEFAULT_DPI})')
    p.add_argument('--title', help='the figure title (default: none)')
    return p


def group_runs(exp_dirs: list[str]) -> dict[str, list[list[dict[str, float]]]]:
    """``{config label: [evaluations of each seed]}`` in the order given; raises ``RunRecordError``."""
    groups: dict[str, list[list[dict[str, float]]]] = {}
    for exp_dir in exp_dirs:
        groups.setdefault(config_label(exp_dir), []).append(read_evals(exp_dir))
    return groups


def seeds_mean_and_spread(runs: list[list[dict[str, float]]], x_key: str) -> tuple[Any, Any, Any, Any] | None:
    """The runs' returns on a common x grid from where every run has data to where the longest one ends: a run's
    return at x is that of its latest evaluation at or before x, so a run that ended (solved: its last evaluation
    reached the stop value) keeps its last return. None when some run starts after another has ended."""
    xs = [np.array([r[x_key] for r in run]) for run in runs]
    ys = [np.array([r['eval_return'] for r in run]) for run in runs]
    start, end = max(x[0] for x in xs), max(x[-1] for x in xs)
    if start > min(x[-1] for x in xs):
        return None
    grid = np.unique(np.concatenate([x[(x >= start) & (x <= end)] for x in xs]))
    curves = np.stack([y[np.searchsorted(x, grid, side='right') - 1] for x, y in zip(xs, ys)])
    return grid, curves.mean(axis=0), curves.min(axis=0), curves.max(axis=0)


def draw(groups: dict[str, list[list[dict[str, float]]]], output: str, dpi: int, title: str | None) -> None:
    """Write the figure of ``groups`` to ``output``."""
    try:
        import matplotlib  # deferred: an optional extra, and `ding` starts without it
    except ImportError:
        raise RunRecordError(
            "matplotlib is not installed; it comes with the plot extra: pip install 'ding[plot]'"
        ) from None
    matplotlib.use('Agg')  # files only: no display needed
    import matplotlib.pyplot as plt  # deferred with matplotlib

    fig, axes = plt.subplots(1, 2, figsize=FIGURE_SIZE, dpi=dpi)
    for x_key, axis, x_label in (('env_step', axes[0], 'env steps'), ('wall_s', axes[1], 'wall time (s)')):
        for name, runs in groups.items():
            label = name if len(runs) == 1 else f'{name} ({len(runs)} seeds)'
            color = None
            for run in runs:  # every evaluation of every seed, thin when there are several
                (line,) = axis.plot(
                    [r[x_key] for r in run],
                    [r['eval_return'] for r in run],
                    drawstyle='steps-post',
                    color=color,
                    linewidth=1.5 if len(runs) == 1 else 0.6,
                    alpha=1.0 if len(runs) == 1 else 0.5,
                    label=label if len(runs) == 1 else None,
                )
                color = line.get_color()
            spread = seeds_mean_and_spread(runs, x_key) if len(runs) > 1 else None
            if spread is not None:  # the seeds' mean and min-max band (a finished seed keeps its last return)
                grid, mean, low, high = spread
                axis.plot(grid, mean, drawstyle='steps-post', color=color, linewidth=2, label=label)
                axis.fill_between(grid, low, high, step='post', color=color, alpha=0.2, linewidth=0)
            elif len(runs) > 1:
                axis.plot([], [], color=color, label=label)
        axis.set_xlabel(x_label)
        axis.set_ylabel('eval return')
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize='small', loc='best')
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(output, dpi=dpi)
    except OSError as exc:
        raise RunRecordError(f'{output}: cannot write the picture ({exc.strerror or exc})') from None
    finally:
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.dpi <= 0:
        print(f'ding plot: error: --dpi must be > 0, got {args.dpi}', file=sys.stderr)
        return 2
    try:
        draw(group_runs(args.exp_dirs), args.output, args.dpi, args.title)
    except RunRecordError as exc:
        print(f'ding plot: error: {exc}', file=sys.stderr)
        return 2
    print(f'ding plot: wrote {args.output}', file=sys.stderr)
    return 0


__all__ = ['main', 'group_runs', 'seeds_mean_and_spread', 'draw', 'FIGURE_SIZE', 'DEFAULT_DPI']
