"""Tasks: asynchronous run on the slave, completion and failure callbacks, refusal, busy slave, timeout."""

import threading
import time
from typing import Any

import pytest

from ding.interaction import SlaveErrorCode, SlaveTaskAlreadyExist, SlaveTaskRefused, TaskRefuse, TaskStatus
from tests.helpers.interaction import CalcSlave
from tests.helpers.wait import wait_until


def test_task_completes_and_callbacks_fire_in_order(conn):
    events = []
    task = conn.new_task({'op': 'add', 'a': 2, 'b': 3})
    assert task.status == TaskStatus.IDLE
    returned = (
        task.on_complete(lambda data, result: events.append(('first', data, result)))
        .on_fail(lambda data, result: events.append(('fail', result)))
        .on_complete(lambda data, result: events.append(('second', result['sum'])))
        .start()
        .join(timeout=5)
    )
    assert returned is task
    assert task.status == TaskStatus.TASK_COMPLETED == TaskStatus.COMPLETED
    assert task.result == {'sum': 5} and task.error is None
    # join() returns only after the callbacks ran
    assert events == [('first', {'op': 'add', 'a': 2, 'b': 3}, {'sum': 5}), ('second', 5)]
    assert conn.tasks == []


def test_task_fail_reports_result_and_message(conn):
    failures = []
    task = conn.new_task({'op': 'fail'}).on_fail(lambda data, result: failures.append(result)).start().join(5)
    assert task.status == TaskStatus.TASK_FAILED
    assert task.result == {'reason': 'asked to fail', 'message': 'failing on purpose'}
    assert failures == [task.result]


def test_unexpected_exception_is_reported_as_failure(conn, slave):
    task = conn.new_task({'op': 'crash'}).start().join(5)
    assert task.status == TaskStatus.TASK_FAILED
    assert task.result['message'] == 'ZeroDivisionError: division by zero'
    # the slave is free again
    assert conn.new_task({'op': 'add', 'a': 1, 'b': 1}).start().join(5).result == {'sum': 2}


class PickySlave(CalcSlave):
    """Refuses tasks without a name up front; refuses 'late' tasks from inside _process_task."""

    def _before_task(self, data: dict[str, Any]) -> None:
        if 'name' not in data:
            raise TaskRefuse({'needs': 'name'}, message='task has no name')

    def _process_task(self, task: dict[str, Any]) -> dict[str, Any]:
        if task['name'] == 'late':
            raise TaskRefuse({'why': 'changed my mind'})
        return {'done': task['name']}


def test_task_refused_before_it_runs(make_master, make_slave):
    master, slave = make_master(), make_slave(PickySlave)
    with master.new_connection('picky', '127.0.0.1', slave.port) as conn:
        failures = []
        task = conn.new_task({'op': 'add'}).on_fail(lambda data, result: failures.append(result)).start()
        # refused at start: the task has already ended, join() returns at once
        assert task.status == TaskStatus.TASK_FAILED
        assert isinstance(task.error, SlaveTaskRefused)
        assert task.error.status_code == 403 and task.error.data == {'needs': 'name'}
        assert task.result['code'] == SlaveErrorCode.TASK_REFUSED
        assert 'task has no name' in task.result['message']
        assert failures == [task.result]
        assert slave.seen == []

        late = conn.new_task({'name': 'late'}).start().join(5)
        assert late.status == TaskStatus.TASK_FAILED
        assert late.result == {'why': 'changed my mind', 'message': 'Task refused.', 'refused': True}
        assert conn.new_task({'name': 'ok'}).start().join(5).result == {'done': 'ok'}


def test_task_runs_asynchronously_and_the_slave_takes_one_at_a_time(conn, slave):
    task = conn.new_task({'op': 'wait'}).start()
    # start() returned while the slave is still processing
    assert slave.entered.wait(5)
    assert task.status == TaskStatus.STARTED and slave.current_task_id == task.id
    assert conn.tasks == [task]

    busy = conn.new_task({'op': 'add', 'a': 1, 'b': 2}).start()
    assert busy.status == TaskStatus.TASK_FAILED and isinstance(busy.error, SlaveTaskAlreadyExist)

    slave.release.set()
    assert task.join(5).status == TaskStatus.TASK_COMPLETED and task.result == {'waited': True}
    assert slave.current_task_id is None


def test_next_task_can_be_sent_from_a_completion_callback(conn):
    second = {}

    def chain(data, result):
        second['task'] = conn.new_task({'op': 'add', 'a': result['sum'], 'b': 10}).start().join(5)

    conn.new_task({'op': 'add', 'a': 1, 'b': 2}).on_complete(chain).start().join(5)
    assert second['task'].status == TaskStatus.TASK_COMPLETED and second['task'].result == {'sum': 13}


def test_task_timeout_fails_a_task_without_answer(conn, slave):
    failures = []
    begin = time.monotonic()
    task = conn.new_task({'op': 'wait'}, timeout=0.3).on_fail(lambda data, result: failures.append(result))
    task.start().join(5)
    assert 0.3 <= time.monotonic() - begin < 4.5  # generous: CI machines can be CPU-starved
    assert task.status == TaskStatus.TASK_FAILED
    assert 'timed out' in task.result['message'] and failures == [task.result]
    assert conn.tasks == [] and conn.is_connected
    # the late answer is refused by the master (unknown task) and changes nothing
    slave.release.set()
    # one task at a time: the next is accepted once the slave's thread has left the timed-out one
    assert wait_until(lambda: slave.current_task_id is None)
    assert conn.new_task({'op': 'add', 'a': 1, 'b': 1}).start().join(5).status == TaskStatus.TASK_COMPLETED


def test_disconnect_fails_tasks_in_flight(master, slave):
    conn = master.new_connection('calc', '127.0.0.1', slave.port)
    conn.connect()
    task = conn.new_task({'op': 'wait'}).start()
    assert slave.entered.wait(5)
    conn.disconnect()
    assert task.join(5).status == TaskStatus.TASK_FAILED
    assert 'disconnected' in task.result['message']


def test_task_on_a_disconnected_connection_fails_at_start(master, slave):
    conn = master.new_connection('calc', '127.0.0.1', slave.port)
    task = conn.new_task({'op': 'add', 'a': 1, 'b': 1}).start()
    assert task.status == TaskStatus.TASK_FAILED and 'not connected' in task.result['message']


def test_task_api_misuse_raises(conn):
    with pytest.raises(TypeError, match='dict'):
        conn.new_task(['not', 'a', 'dict'])
    with pytest.raises(ValueError, match='timeout'):
        conn.new_task({}, timeout=0)
    task = conn.new_task({'op': 'add', 'a': 1, 'b': 1})
    with pytest.raises(ValueError, match='never started'):
        task.join()
    task.start().join(5)
    with pytest.raises(ValueError, match='only be started once'):
        task.start()
    unsendable = conn.new_task({'blob': object()})
    with pytest.raises(TypeError):
        unsendable.start()
    assert unsendable.status == TaskStatus.IDLE and conn.tasks == []


def test_callback_added_after_the_end_runs_at_once(conn):
    task = conn.new_task({'op': 'add', 'a': 1, 'b': 1}).start().join(5)
    seen = []
    task.on_complete(lambda data, result: seen.append(result)).on_fail(lambda data, result: seen.append('fail'))
    assert seen == [{'sum': 2}]


def test_a_raising_callback_does_not_block_join(conn):
    ran = threading.Event()

    def bad(data, result):
        raise RuntimeError('callback bug')

    task = conn.new_task({'op': 'add', 'a': 1, 'b': 1}).on_complete(bad).on_complete(lambda d, r: ran.set())
    task.start().join(5)
    assert task.status == TaskStatus.TASK_COMPLETED and ran.is_set()
