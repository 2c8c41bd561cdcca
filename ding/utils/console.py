"""How much a run says on the console: ``quiet`` (the summary and errors), ``normal`` (the progress bar, one line
per evaluation, warnings and errors, the summary) or ``verbose`` (also every table the log files get).

The level comes from ``DING_CONSOLE`` (the ``ding`` command sets it from ``-q`` / ``-v`` or the config's
``console`` key, so the processes a run starts inherit it), else from the level the running pipeline set from
its config (``set_console_level``), else ``normal``. ``DING_QUIET=1`` (set for ranks other than 0) keeps the
loggers' console to errors whatever the level.
Whatever the level, the log files under ``./{exp_name}/log/`` get everything.
"""

from __future__ import annotations

import logging
import os
import sys

CONSOLE_LEVELS = ('quiet', 'normal', 'verbose')
CONSOLE_ENV = 'DING_CONSOLE'
# The ``extra`` of a log record that belongs on a normal console too (``logger.info(msg, extra=CONSOLE_LINE)``),
# and of one that goes to the log file only, at every level (a line the console already got another way).
CONSOLE_LINE = {'console': True}
FILE_ONLY = {'console': False}

_config_level: str | None = None


def console_level_problem(value: object, where: str) -> str | None:
    """Why ``value`` is not a console level (``where`` names the key or variable), None when it is one."""
    if value in CONSOLE_LEVELS:
        return None
    return f'{where} must be one of {list(CONSOLE_LEVELS)}, got {value!r}'


def set_console_level(level: str | None) -> None:
    """The level of this process's runs when ``DING_CONSOLE`` is not set (None: back to ``normal``)."""
    global _config_level
    if level is not None:
        problem = console_level_problem(level, 'console')
        if problem:
            raise ValueError(problem)
    _config_level = level


def console_level() -> str:
    env = os.environ.get(CONSOLE_ENV)
    if env in CONSOLE_LEVELS:
        return str(env)
    return _config_level or 'normal'


def is_quiet() -> bool:
    return console_level() == 'quiet'


def say(line: str) -> None:
    """Print a progress note (resumed from..., rank layout) on stderr, except at the ``quiet`` level."""
    if not is_quiet():
        print(line, file=sys.stderr, flush=True)


class ConsoleFilter(logging.Filter):
    """Lets a record through to the console by the level at the time it is logged: warnings and errors at
    ``normal``, and the records marked with ``CONSOLE_LINE``; errors only at ``quiet``; all at ``verbose``.
    Records marked ``FILE_ONLY`` never."""

    def filter(self, record: logging.LogRecord) -> bool:
        marked = getattr(record, 'console', None)
        if marked is False:
            return False
        level = 'quiet' if os.environ.get('DING_QUIET', '') == '1' else console_level()
        if level == 'verbose':
            return True
        if level == 'quiet':
            return record.levelno >= logging.ERROR
        return record.levelno >= logging.WARNING or bool(marked)


class ConsoleHandler(logging.StreamHandler):
    """The console handler of ``build_logger``: ``sys.stderr`` as it is when a record comes, what ``ConsoleFilter`` lets through, written above a
    progress bar being shown (the bar is cleared and drawn again) rather than into it."""

    def __init__(self, name: str) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(PrefixFormatter(name))
        self.addFilter(ConsoleFilter())

    def flush(self) -> None:
        self.stream = sys.stderr  # the current one: follows a redirection made after the logger was built
        super().flush()

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        bars = sys.modules.get('tqdm')  # imported only once a bar was made: without it there is none to keep clear
        if bars is None:
            super().emit(record)
            return
        with bars.tqdm.external_write_mode(file=self.stream):
            super().emit(record)


class PrefixFormatter(logging.Formatter):
    """``[name] message``, once: a message that already starts with ``[name]`` keeps its own prefix."""

    def __init__(self, name: str) -> None:
        super().__init__('%(message)s')
        self._prefix = f'[{name}]'

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if text.startswith(self._prefix) else f'{self._prefix} {text}'


__all__ = [
    'CONSOLE_LEVELS',
    'CONSOLE_ENV',
    'CONSOLE_LINE',
    'FILE_ONLY',
    'ConsoleFilter',
    'ConsoleHandler',
    'PrefixFormatter',
    'console_level',
    'console_level_problem',
    'is_quiet',
    'say',
    'set_console_level',
]
