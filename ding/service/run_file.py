"""``run.json``: where a run's service listens and its control token, for ``ding ctl --exp-dir``."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Mapping
from typing import Any

RUN_FILE = 'run.json'


def new_run_id() -> str:
    """A run id unique enough to tell runs apart in logs and metrics: time plus 6 random hex digits."""
    return time.strftime('%Y%m%d-%H%M%S') + '-' + secrets.token_hex(3)


def run_file_path(exp_name: str) -> str:
    return os.path.join('.', exp_name, RUN_FILE)


def write_run_file(path: str, info: Mapping[str, Any]) -> None:
    """Write ``info`` as JSON readable by the owner only (mode 0600: it holds the control token)."""
    directory = os.path.dirname(path) or '.'
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f'.{os.path.basename(path)}.{os.getpid()}.tmp')
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            json.dump(dict(info), f, indent=1)
            f.write('\n')
        os.chmod(tmp, 0o600)  # O_CREAT's mode is filtered by the umask; make sure nobody else can read it
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def read_run_file(path: str) -> dict[str, Any]:
    with open(path, encoding='utf-8') as f:
        return json.load(f)


__all__ = ['RUN_FILE', 'new_run_id', 'run_file_path', 'write_run_file', 'read_run_file']
