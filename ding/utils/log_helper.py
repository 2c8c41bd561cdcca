"""Text loggers and the tensorboard writer a component gets from ``build_logger``."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any


def build_logger(
    path: str, name: str | None = None, need_tb: bool = True, to_console: bool = True
) -> tuple[logging.Logger, Any | None]:
    """Return ``(text_logger, tb_writer)``.

    The text logger writes ``{path}/{name}_logger.txt`` (and the console unless ``to_console`` is
    False); ``tb_writer`` is a tensorboard ``SummaryWriter`` (see ``summary_writer_cls``) on ``{path}/{name}/``
    or None.
    """
    name = name or 'default'
    os.makedirs(path, exist_ok=True)
    logger = logging.getLogger(f'ding.{path}.{name}')
    logger.setLevel(logging.INFO)
    logger.propagate = False
    log_file = os.path.abspath(os.path.join(path, f'{name}_logger.txt'))
    if not any(getattr(h, 'baseFilename', None) == log_file for h in logger.handlers):
        fmt = logging.Formatter('[%(asctime)s] %(levelname)s %(message)s', '%Y-%m-%d %H:%M:%S')
        file_handler = logging.FileHandler(log_file)
        file_handler.setFormatter(fmt)
        logger.addHandler(file_handler)
        if to_console and os.environ.get('DING_QUIET', '') != '1':
            console = logging.StreamHandler(sys.stderr)
            console.setFormatter(logging.Formatter(f'[{name}] %(message)s'))
            logger.addHandler(console)
    tb_logger = summary_writer_cls()(os.path.join(path, name)) if need_tb else None
    return logger, tb_logger


def summary_writer_cls() -> type:
    """The tensorboard writer class components use: ``ding.utils.tb_writer.SummaryWriter`` (scalars written
    without importing tensorboardX; other ``add_*`` calls are handed to a tensorboardX writer)."""
    from .tb_writer import SummaryWriter

    return SummaryWriter


def tensorboardx_writer_cls() -> type:
    """tensorboardX's ``SummaryWriter`` class, imported on first use (heavy: only components that need it pay).

    tensorboardX imports boto3 when it is installed, only to support ``s3://`` log paths, which ding
    never writes; hiding boto3 during that import saves ~0.2 s of every run's start-up.
    """
    import sys

    if 'tensorboardX' not in sys.modules and 'boto3' not in sys.modules:
        sys.modules['boto3'] = None  # makes `import boto3` raise ImportError inside tensorboardX
        try:
            pass
        finally:
            del sys.modules['boto3']
    from tensorboardX import SummaryWriter as writer_cls

    return writer_cls


def close_logger(logger: logging.Logger) -> None:
    """Flush and detach every handler so the log file is released."""
    for handler in list(logger.handlers):
        handler.flush()
        handler.close()
        logger.removeHandler(handler)


def pretty_table(rows: dict, title: str = '') -> str:
    """Render ``{name: value}`` as a two-column text table."""
    if not rows:
        return title
    width = max(len(str(k)) for k in rows)
    cells = [f'{k:<{width}} | {_fmt(v)}' for k, v in rows.items()]
    line = '-' * max(len(c) for c in cells)
    head = [title, line] if title else [line]
    return '\n'.join(head + cells + [line])


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f'{v:.6g}'
    return str(v)
