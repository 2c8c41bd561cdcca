"""``build_logger`` / ``build_summary_writer``: tensorboardX writers whose scalars reach the event file while the
run is live (before ``close``), and text logs on disk (a log file the disk refuses is reported once, then left)."""

import os
import time

import pytest

from ding.utils.log_helper import TB_FLUSH_SECS, build_logger, build_summary_writer, close_logger, summary_writer_cls
from tests.helpers.learner_policies import read_tb_events


def _wait_for_tag(logdir: str, tag: str, timeout: float, count: int = 1) -> list:
    """The events of ``tag`` once ``count`` of them are on disk (the writer's thread writes them one by one)."""
    deadline = time.monotonic() + timeout
    while True:
        events = read_tb_events(logdir).get(tag, [])
        if len(events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.1)


def test_the_writer_is_tensorboardx():
    from tensorboardX import SummaryWriter

    assert summary_writer_cls() is SummaryWriter


def test_scalars_reach_the_event_file_while_the_writer_is_open(tmp_path):
    logdir = str(tmp_path / 'tb')
    writer = build_summary_writer(logdir)
    try:
        writer.add_scalar('learner/loss', 0.25, 0)
        writer.add_scalar('learner/loss', 0.125, 7)
        writer.flush()
        events = _wait_for_tag(logdir, 'learner/loss', timeout=TB_FLUSH_SECS + 5, count=2)
        assert events == [(0, 0.25), (7, 0.125)]
        writer.add_scalar('eval/return', 195.5, 300)  # a later scalar too, not only the first flush
        assert _wait_for_tag(logdir, 'eval/return', timeout=TB_FLUSH_SECS + 5) == [(300, 195.5)]
    finally:
        writer.close()


def test_build_logger_writes_text_and_tensorboard(tmp_path):
    logger, writer = build_logger(str(tmp_path), 'learner', to_console=False)
    assert writer is not None
    logger.info('iteration 3 done')
    writer.add_scalar('learner_iter/total_loss', 1.5, 3)
    writer.close()
    close_logger(logger)
    assert 'iteration 3 done' in (tmp_path / 'learner_logger.txt').read_text()
    assert read_tb_events(str(tmp_path / 'learner')) == {'learner_iter/total_loss': [(3, 1.5)]}


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='needs /dev/full (every write fails: ENOSPC)')
def test_a_full_log_disk_is_reported_once_and_the_file_switched_off(tmp_path, capfd):
    # The log file is /dev/full: every write fails with "No space left on device", a real full disk as root sees it.
    log_file = tmp_path / 'learner_logger.txt'
    log_file.symlink_to('/dev/full')
    logger, _ = build_logger(str(tmp_path), 'learner', need_tb=False, to_console=False)
    try:
        for i in range(20):
            logger.info(f'iteration {i}')
        logger.error('still nothing raised to the caller')
    finally:
        close_logger(logger)
    err = capfd.readouterr().err
    assert err.count('ding: WARNING: cannot write the log file') == 1, err
    assert str(log_file) in err and 'No space left on device' in err and 'switched off' in err
    assert 'Logging error' not in err and 'Traceback' not in err
