"""What reaches the console at each level; the log file gets everything whatever the level."""

import logging

import pytest

from ding.utils.console import CONSOLE_LINE, FILE_ONLY, console_level, set_console_level
from ding.utils.log_helper import build_logger, close_logger


@pytest.fixture
def logger(tmp_path, monkeypatch):
    monkeypatch.delenv('DING_CONSOLE', raising=False)
    monkeypatch.delenv('DING_QUIET', raising=False)
    logger, _ = build_logger(str(tmp_path), 'evaluator', need_tb=False)
    yield logger
    close_logger(logger)
    set_console_level(None)


def _log_all(logger):
    logger.info('a table row')
    logger.info('one line per evaluation', extra=CONSOLE_LINE)
    logger.info('[evaluator] a line with its own prefix', extra=CONSOLE_LINE)
    logger.info('the summary, printed elsewhere', extra=FILE_ONLY)
    logger.warning('a warning')
    logger.error('an error')


@pytest.mark.parametrize(
    ('level', 'shown'),
    [
        (
            'normal',
            [
                '[evaluator] one line per evaluation',
                '[evaluator] a line with its own prefix',
                '[evaluator] a warning',
                '[evaluator] an error',
            ],
        ),
        ('quiet', ['[evaluator] an error']),
        (
            'verbose',
            [
                '[evaluator] a table row',
                '[evaluator] one line per evaluation',
                '[evaluator] a line with its own prefix',
                '[evaluator] a warning',
                '[evaluator] an error',
            ],
        ),
    ],
)
def test_the_console_shows_what_its_level_lets_through_with_one_prefix(
    logger, tmp_path, capsys, monkeypatch, level, shown
):
    monkeypatch.setenv('DING_CONSOLE', level)
    _log_all(logger)
    assert capsys.readouterr().err.splitlines() == shown
    for handler in logger.handlers:
        handler.flush()
    text = (tmp_path / 'evaluator_logger.txt').read_text()
    for message in ('a table row', 'one line per evaluation', 'the summary, printed elsewhere', 'an error'):
        assert message in text


def test_the_environment_wins_over_the_config_level(monkeypatch):
    monkeypatch.delenv('DING_CONSOLE', raising=False)
    monkeypatch.delenv('DING_QUIET', raising=False)
    try:
        assert console_level() == 'normal'
        set_console_level('verbose')
        assert console_level() == 'verbose'
        monkeypatch.setenv('DING_CONSOLE', 'quiet')
        assert console_level() == 'quiet'
    finally:
        set_console_level(None)


def test_ding_quiet_keeps_the_loggers_to_errors(logger, capsys, monkeypatch):
    monkeypatch.setenv('DING_CONSOLE', 'verbose')
    monkeypatch.setenv('DING_QUIET', '1')  # what ranks other than 0 get
    _log_all(logger)
    assert capsys.readouterr().err.splitlines() == ['[evaluator] an error']


def test_a_bad_level_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"console must be one of \['quiet', 'normal', 'verbose'\], got 'loud'"):
        set_console_level('loud')


def test_a_record_logged_while_a_bar_is_shown_goes_above_it(logger, capsys, monkeypatch):
    from tqdm import tqdm

    monkeypatch.setenv('DING_CONSOLE', 'normal')
    import sys

    bar = tqdm(total=10, file=sys.stderr, desc='bar')
    try:
        bar.update(3)
        logger.warning('between')
    finally:
        bar.close()
    err = capsys.readouterr().err
    assert '\n[evaluator] between\n' in err.replace('\r', '\n')
    assert logging.getLogger('unrelated').handlers == []
