"""Worker entries of the coordinator config, in both layouts, and the errors for malformed ones; a worker held by
someone else is reported; an 'auto' master port taken since the config was compiled is replaced."""

import logging
import socket
import time
from typing import Any

import pytest

from ding.interaction import Master
from ding.interaction.base.auth import new_run_secret
from ding.worker.coordinator.worker_links import WorkerLinks, parse_worker_entries
from tests.helpers.interaction import FAST_MASTER, FAST_SLAVE, CalcSlave
from tests.helpers.toy_workers import ToyCollectorSlave
from tests.helpers.wait import wait_until


def test_both_entry_layouts_give_host_and_port():
    entries = {'learner0': ['learner0', '127.0.0.1', 5000], 'learner1': {'host': '10.0.0.2', 'port': 5001}}
    assert parse_worker_entries('learner', entries) == {
        'learner0': ('127.0.0.1', 5000),
        'learner1': ('10.0.0.2', 5001),
    }
    assert parse_worker_entries('collector', None) == {}


@pytest.mark.parametrize(
    'entry, needle',
    [(['c0', '127.0.0.1'], 'must be [name, host, port]'), (['c0', '127.0.0.1', 'auto'], "fill 'auto' ports")],
)
def test_malformed_entries_are_refused(entry, needle):
    with pytest.raises(ValueError, match=needle.replace('[', r'\[').replace(']', r'\]')):
        parse_worker_entries('collector', {'c0': entry})


class _Recorder:
    """The links' callbacks, recorded."""

    def __init__(self) -> None:
        self.squatted: list[tuple[str, str, str]] = []

    def links(self, worker_port: int, secret: str, **master: Any) -> WorkerLinks:
        cfg = {'collector': {'c0': ['c0', '127.0.0.1', worker_port]}, 'port': 0, 'reconnect_interval': 0.05, **master}
        return WorkerLinks(
            cfg,
            logging.getLogger('test_worker_links'),
            on_change=lambda: None,
            on_collector_gained=lambda: None,
            on_collector_lost=lambda: None,
            secret=secret,
            on_squatted=lambda kind, name, reason: self.squatted.append((kind, name, reason)),
        )


@pytest.mark.parametrize('bound_elsewhere', [False, True])
def test_a_squatted_worker_is_reported_once_at_error(caplog, bound_elsewhere):
    """Its port answers without this run's secret, or the worker is bound to another master."""
    secret = new_run_secret()
    squatter = CalcSlave(port=0, secret=secret if bound_elsewhere else None, **FAST_SLAVE)
    squatter.start()
    other = Master(port=0, secret=secret, **FAST_MASTER)
    recorder = _Recorder()
    links = recorder.links(squatter.port, secret)
    try:
        if bound_elsewhere:
            other.start()
            other.new_connection('c0', '127.0.0.1', squatter.port).connect()
        with caplog.at_level(logging.INFO, logger='test_worker_links'):
            links.start()
            wait_until(lambda: recorder.squatted, 10, what='the squatted worker to be reported')
            time.sleep(0.3)  # several more connection rounds: still reported once
        assert [(kind, name) for kind, name, _ in recorder.squatted] == [('collector', 'c0')]
        expected = 'SlaveSlaveAlreadyConnected' if bound_elsewhere else 'SlaveNotAuthenticated'
        assert expected in recorder.squatted[0][2]
        errors = [r for r in caplog.records if r.levelno == logging.ERROR and 'held by someone else' in r.message]
        assert len(errors) == 1 and expected in errors[0].message
        assert links.connected_workers('collector') == []
    finally:
        links.stop()
        links.join(5)
        links.close_master()
        other.close()
        squatter.close()


@pytest.mark.parametrize('port_auto', [True, False])
def test_a_taken_master_port_is_replaced_only_when_it_was_auto(caplog, port_auto):
    """The compiler chose the port for ``port: 'auto'``; something took it before the coordinator started."""
    secret = new_run_secret()
    squatter = socket.create_server(('127.0.0.1', 0))
    taken = squatter.getsockname()[1]
    worker = ToyCollectorSlave(secret=secret)
    worker.start()
    links = _Recorder().links(worker.port, secret, port=taken, port_auto=port_auto)
    try:
        with caplog.at_level(logging.INFO, logger='test_worker_links'):
            if not port_auto:  # a port the user gave is theirs to fix: refused, naming it
                with pytest.raises(OSError, match=f'cannot listen on 127.0.0.1:{taken}'):
                    links.start()
                return
            links.start()
            # the worker learns the new address when the master connects: it is reached and kept
            wait_until(lambda: links.connected_workers('collector') == ['c0'], 10, what='the worker to connect')
        assert links.master.port not in (0, taken)
        warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
        assert any(f'port {taken}' in m and f'listening on port {links.master.port}' in m for m in warnings)
    finally:
        links.stop()
        links.join(5)
        links.close_master()
        worker.close()
        squatter.close()
