"""``ding summary EXP_DIR [EXP_DIR ...]``: one row per run (config, seed, solved, env steps, wall, best return).

A run still going (no ``summary.json`` yet) is shown from its ``log/eval.jsonl`` as ``running``. Exit status:
0 printed, 2 bad input (the path named).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from .run_records import RunRecordError, config_label, read_evals, read_summary

COLUMNS = ('run', 'config', 'seed', 'solved', 'env steps', 'iters', 'wall s', 'best return')


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='ding summary', description='A table of runs and how they ended.')
    p.add_argument('exp_dirs', nargs='+', metavar='EXP_DIR', help='run directories (./EXP_NAME)')
    p.add_argument('--json', action='store_true', help='print the rows as JSON lines instead of a table')
    return p


def _seed_of(exp_dir: str, summary: dict[str, Any] | None) -> Any:
    if summary is not None and summary.get('seed') is not None:
        return summary['seed']
    found = re.search(r'_seed(\d+)$', os.path.basename(os.path.normpath(exp_dir)))
    return int(found.group(1)) if found else None


def run_row(exp_dir: str) -> dict[str, Any]:
    """What ``ding summary`` shows of one run; raises ``RunRecordError`` for a directory that is not a run."""
    summary = read_summary(exp_dir)
    row: dict[str, Any] = {
        'run': os.path.normpath(exp_dir),
        'config': config_label(exp_dir),
        'seed': _seed_of(exp_dir, summary),
    }
    if summary is not None:
        row.update(
            solved='yes' if summary.get('solved') else f'no ({summary.get("reason")})',
            env_steps=summary.get('env_steps'),
            train_iters=summary.get('train_iters'),
            wall_s=summary.get('wall_s'),
            best_return=summary.get('best_eval_return'),
        )
        return row
    evals = read_evals(exp_dir)  # no summary yet: a run still going (or killed); its evaluations tell how far
    row.update(
        solved='running',
        env_steps=int(evals[-1]['env_step']),
        train_iters=int(evals[-1]['train_iter']),
        wall_s=evals[-1]['wall_s'],
        best_return=max(e['eval_return'] for e in evals),
    )
    return row


def _cell(value: Any) -> str:
    if value is None:
        return '-'
    if isinstance(value, float):
        return f'{value:.2f}' if abs(value) < 1e6 else f'{value:.4g}'
    return str(value)


def format_table(rows: list[dict[str, Any]]) -> str:
    keys = ('run', 'config', 'seed', 'solved', 'env_steps', 'train_iters', 'wall_s', 'best_return')
    cells = [list(COLUMNS)] + [[_cell(row.get(k)) for k in keys] for row in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ['  '.join(c[i].ljust(widths[i]) for i in range(len(COLUMNS))).rstrip() for c in cells]
    return '\n'.join([lines[0], '-' * len(lines[0])] + lines[1:])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rows = [run_row(d) for d in args.exp_dirs]
    except RunRecordError as exc:
        print(f'ding summary: error: {exc}', file=sys.stderr)
        return 2
    if args.json:
        print('\n'.join(json.dumps(row) for row in rows))
    else:
        print(format_table(rows))
    return 0


__all__ = ['main', 'run_row', 'format_table']
