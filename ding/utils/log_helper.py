"""Text loggers and the tensorboard writer a component gets from ``build_logger``."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from .console import ConsoleHandler

if TYPE_CHECKING:
    from tensorboardX import SummaryWriter

# Seconds within which a scalar written to a tensorboard writer reaches its event file.
TB_FLUSH_SECS = 2.0


class LogFileHandler(logging.FileHandler):
    """The text loggers' file handler. When its file cannot be written (disk full, I/O error, read-only file
    system) it says so once on stderr, naming the file, and writes nothing more to it; the run goes on and the
    other handlers (the console) keep logging. Python's own handling would print a "--- Logging error ---"
    traceback for every record, for as long as the disk stays full."""

    def __init__(self, filename: str) -> None:
        super().__init__(filename)
        self.failure: str | None = None  # why the file was switched off, None while it is written

    def emit(self, record: logging.LogRecord) -> None:
        if self.failure is None:
            super().emit(record)

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            self._switch_off(exc)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            self._switch_off(exc)
        else:
            super().handleError(record)

    def _switch_off(self, exc: OSError) -> None:
        if self.failure is not None:
            return
        self.failure = exc.strerror or str(exc)
        try:
            sys.stderr.write(
                f'ding: WARNING: cannot write the log file {self.baseFilename} ({self.failure}); logging to that '
                'file is switched off for the rest of the run (training goes on)\n'
            )
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr on the same full disk, or closed: nowhere left to say it
            pass
        stream, self.stream = self.stream, None
        try:
            if stream is not None:
                stream.close()  # its unwritten buffer fails again: the file descriptor is released regardless
        except OSError:
            pass


def build_logger(
    path: str, name: str | None = None, need_tb: bool = True, to_console: bool = True
) -> tuple[logging.Logger, SummaryWriter | None]:
    """Return ``(text_logger, tb_writer)``.

    The text logger writes ``{path}/{name}_logger.txt`` and, unless ``to_console`` is False, the console what
    the console level lets through (``ding.utils.console``: warnings, errors and ``CONSOLE_LINE`` records by
    default); ``tb_writer`` is tensorboardX's ``SummaryWriter`` (``build_summary_writer``) on ``{path}/{name}/``
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
        file_handler = LogFileHandler(log_file)
        file_handler.setFormatter(fmt)
        logger.addHandler(file_handler)
        if to_console:
            logger.addHandler(ConsoleHandler(name))  # the console level (ding.utils.console) decides what shows
    tb_logger = build_summary_writer(os.path.join(path, name)) if need_tb else None
    return logger, tb_logger


def summary_writer_cls() -> type[SummaryWriter]:
    """tensorboardX's ``SummaryWriter`` class (build one with ``build_summary_writer`` to see scalars live)."""
    from tensorboardX import SummaryWriter  # deferred: tensorboardX and protobuf cost ~0.1 s; `ding ctl` skips them

    return SummaryWriter


def build_summary_writer(logdir: str) -> SummaryWriter:
    """A tensorboardX writer on ``logdir`` whose events reach the file within ``TB_FLUSH_SECS`` while the run is
    live. Its ``flush()`` only flushes what its writer thread has already taken from the queue, and by default
    that thread puts events on disk every 120 s: a short ``flush_secs`` makes TensorBoard follow a run."""
    return summary_writer_cls()(logdir, flush_secs=TB_FLUSH_SECS)


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


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f'{v:.6g}'
    return str(v)
