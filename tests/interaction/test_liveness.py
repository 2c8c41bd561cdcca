"""Heartbeats: live slaves stay connected, dead ones are dropped within the tolerance, both sides recover."""

import subprocess
import sys
import textwrap
import time

import requests

from ding.interaction import MasterSlaveTokenNotMatch, TaskStatus
from tests.helpers.interaction import CalcSlave
from tests.helpers.processes import ROOT, child_env
from tests.helpers.wait import wait_until


class RecordingSlave(CalcSlave):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lost = []

    def _lost_connection(self, master_address, err):
        self.lost.append((master_address, err))


def test_heartbeats_keep_a_connection_alive(make_master, slave):
    master = make_master(heartbeat_tolerance=2.0)
    with master.new_connection('calc', '127.0.0.1', slave.port) as conn:
        time.sleep(4.5)  # well past the tolerance: only heartbeats keep the connection
        assert conn.is_connected and 'calc' in master and slave.is_connected


def test_dead_slave_is_dropped_within_tolerance_and_its_task_fails(make_master, make_slave):
    tolerance = 1.0
    master = make_master(heartbeat_tolerance=tolerance)
    slave = make_slave(heartbeat_span=0.1)
    conn = master.new_connection('calc', '127.0.0.1', slave.port)
    conn.connect()
    failures = []
    task = conn.new_task({'op': 'wait'}).on_fail(lambda data, result: failures.append(result)).start()
    assert slave.entered.wait(5)

    slave.shutdown()  # stops serving and heartbeating, without disconnecting: like a crashed process
    stopped = time.monotonic()
    assert wait_until(lambda: not conn.is_connected, timeout=5)
    noticed = time.monotonic() - stopped
    assert noticed < tolerance + 3.0, noticed  # margin for a CPU-starved machine
    assert 'calc' not in master
    assert task.join(5).status == TaskStatus.TASK_FAILED
    assert failures == [task.result] and 'no heartbeat' in task.result['message']
    assert master.ping()


def test_slave_dropped_by_the_master_frees_itself(make_master, make_slave):
    # The master tolerates less than the slave's heartbeat span, so it drops the slave; the slave learns it
    # from the rejected heartbeat and becomes free for a new connection.
    master = make_master(heartbeat_tolerance=0.2)
    slave = make_slave(RecordingSlave, heartbeat_span=0.6)
    conn = master.new_connection('calc', '127.0.0.1', slave.port)
    conn.connect()
    assert wait_until(lambda: not conn.is_connected, timeout=3)
    assert wait_until(lambda: not slave.is_connected, timeout=3)
    assert len(slave.lost) == 1 and slave.lost[0][0] == master.address
    assert isinstance(slave.lost[0][1], MasterSlaveTokenNotMatch)
    again = make_master().new_connection('calc', '127.0.0.1', slave.port)
    again.connect()
    assert again.is_connected
    again.disconnect()


MASTER_PROCESS = textwrap.dedent(
    """
    import sys, time
    from ding.interaction import Master
    master = Master(port=0, request_retries=0)
    master.start()
    master.new_connection('calc', '127.0.0.1', int(sys.argv[1])).connect()
    print('connected', flush=True)
    time.sleep(60)
    """
)


def test_slave_notices_a_killed_master(make_slave):
    slave = make_slave(RecordingSlave, heartbeat_span=0.1)
    process = subprocess.Popen(
        [sys.executable, '-c', MASTER_PROCESS, str(slave.port)],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline().strip()
        assert line == 'connected', f'master process failed: {line!r}'
        assert slave.is_connected
        process.kill()
        process.wait(5)
        assert wait_until(lambda: not slave.is_connected, timeout=5)
        assert len(slave.lost) == 1 and slave.lost[0][0].startswith('http://127.0.0.1:')
        assert isinstance(slave.lost[0][1], requests.RequestException)  # connection refused or reset
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        process.stdout.close()
