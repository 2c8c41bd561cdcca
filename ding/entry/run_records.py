"""The machine-readable record of a run in its directory, written by the pipelines (``RunProgress``) and read by
``ding plot`` / ``ding summary``:

- ``log/eval.jsonl``: one JSON object per evaluation, appended as it ends (``train_iter``, ``env_step``,
  ``eval_return``, ``wall_s``: seconds since the process started, ``time``: Unix time);
- ``summary.json``: the run's summary line as JSON, replaced atomically when the run ends.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

EVAL_LOG = os.path.join('log', 'eval.jsonl')
SUMMARY_FILE = 'summary.json'
_SEED_SUFFIX = re.compile(r'_seed(\d+)$')


class RunRecordError(Exception):
    """A directory that is not a run, or a run without what was asked of it; the message names the path."""


def config_label(exp_dir: str) -> str:
    """The name the seeds of one config share: the run directory's name without its ``_seedN`` suffix."""
    return _SEED_SUFFIX.sub('', os.path.basename(os.path.normpath(exp_dir)))


def _check_run_dir(exp_dir: str) -> None:
    if not os.path.isdir(exp_dir):
        raise RunRecordError(f'{exp_dir}: no such directory')
    if not (os.path.isdir(os.path.join(exp_dir, 'log')) or os.path.isfile(os.path.join(exp_dir, SUMMARY_FILE))):
        raise RunRecordError(f'{exp_dir}: not a run directory (no log/ and no {SUMMARY_FILE} in it)')


def read_evals(exp_dir: str) -> list[dict[str, float]]:
    """The evaluations of the run in ``exp_dir``, oldest first; raises ``RunRecordError`` when there are none.
    A last line still being written (no newline yet) is left out."""
    _check_run_dir(exp_dir)
    path = os.path.join(exp_dir, EVAL_LOG)
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except FileNotFoundError:
        raise RunRecordError(f'{exp_dir}: no evaluation recorded yet ({path} does not exist)') from None
    except OSError as exc:
        raise RunRecordError(f'{path}: cannot read it ({exc.strerror or exc})') from None
    records = []
    lines = text.split('\n')[:-1]  # the part after the last newline is a line not yet complete
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            records.append({k: float(record[k]) for k in ('train_iter', 'env_step', 'eval_return', 'wall_s')})
        except (ValueError, KeyError, TypeError):
            raise RunRecordError(f'{path}:{number}: not an evaluation record: {line[:120]!r}') from None
    if not records:
        raise RunRecordError(f'{exp_dir}: no evaluation recorded yet ({path} is empty)')
    return records


def read_summary(exp_dir: str) -> dict[str, Any] | None:
    """The run's ``summary.json``, or None while the run has not ended (or ended before writing it)."""
    _check_run_dir(exp_dir)
    path = os.path.join(exp_dir, SUMMARY_FILE)
    try:
        with open(path, encoding='utf-8') as f:
            summary = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RunRecordError(f'{path}: not a readable summary ({exc})') from None
    if not isinstance(summary, dict):
        raise RunRecordError(f'{path}: not a summary (a JSON object expected)')
    return summary


__all__ = ['EVAL_LOG', 'SUMMARY_FILE', 'RunRecordError', 'config_label', 'read_evals', 'read_summary']
