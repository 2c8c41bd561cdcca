"""The coordinator's data plane on real replay buffers and real sample files in a temporary directory."""

import os

import pytest
from easydict import EasyDict

from ding.utils.file_names import manifest_path
from ding.worker.coordinator.coordinator_config import COORDINATOR_DEFAULTS
from ding.worker.coordinator.data_plane import DataPlane
from ding.worker.replay_service import REPLAY_DATA_ID


class Iterations:
    """The learner iteration the data plane paces against, moved by the test."""

    def __init__(self) -> None:
        self.value = 0

    def __call__(self) -> int:
        return self.value


def make_plane(tmp_path, **cfg) -> tuple[DataPlane, Iterations, list[str]]:
    coor_cfg = EasyDict(dict(COORDINATOR_DEFAULTS, **cfg))
    iterations, lines = Iterations(), []
    plane = DataPlane(coor_cfg, str(tmp_path / 'data'), 'test_exp', iterations, lines.append, lines.append)
    os.makedirs(tmp_path / 'data', exist_ok=True)
    return plane, iterations, lines


def learner_task(buffer_id: str, size: int = 100) -> dict:
    return {'buffer_id': buffer_id, 'replay_buffer_cfg': {'type': 'naive', 'replay_buffer_size': size}}


def write_sample_file(tmp_path, name: str) -> str:
    path = tmp_path / 'data' / name
    path.write_bytes(b'samples')
    open(manifest_path(str(path)), 'w').close()
    return str(path)


def metadata(name: str, n: int) -> list[dict]:
    return [{'data_id': f'{name}#{i}', 'collect_iter': 0} for i in range(n)]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # buffers may write logs under ./{exp_name}


def test_pacing_grants_samples_per_learner_iteration_and_keeps_the_open_budget_on_a_tune(tmp_path):
    plane, iterations, _ = make_plane(tmp_path, max_samples_per_iter=2, pacing_warmup_samples=8)
    plane.ensure_buffer(learner_task('b'))
    try:
        assert plane.collect_budget_open()
        plane.push('t', 'b', metadata('f0', 8))
        assert not plane.collect_budget_open()  # warm-up spent, the learner has not advanced
        iterations.value = 1
        assert plane.collect_budget_open() and plane.budget(1) == 10
        plane.push('t', 'b', metadata('f1', 2))
        assert not plane.wait_collect_budget(timeout=0.01)
        open_now = plane.budget(5)
        iterations.value = 5
        plane.set_max_samples_per_iter(4)
        assert plane.budget(5) == open_now  # no burst, no stall: only later iterations count at the new rate
        assert plane.budget(6) == open_now + 4
        plane.paused = True
        assert not plane.collect_budget_open()
    finally:
        plane.stop()
        plane.close(keep_data=True)


def test_a_starving_learner_opens_the_budget(tmp_path):
    plane, _, _ = make_plane(tmp_path, max_samples_per_iter=1, pacing_warmup_samples=4)
    plane.ensure_buffer(learner_task('b'))
    try:
        plane.push('t', 'b', metadata('f0', 4))
        assert not plane.collect_budget_open()
        assert plane.sample('b', 8, 0) is None  # too few samples for a batch: the learner waits
        assert plane.collect_budget_open()
        plane.push('t', 'b', metadata('f1', 4))
        assert len(plane.sample('b', 8, 0)) == 8 and plane.sampled_batches == 1
        assert not plane.collect_budget_open()  # fed again: pacing holds
    finally:
        plane.stop()
        plane.close(keep_data=True)


def test_sample_files_are_deleted_once_no_buffer_refers_to_them(tmp_path):
    plane, _, _ = make_plane(tmp_path)
    foreign = write_sample_file(tmp_path, 'someone_elses')  # path_data may be shared: never touched
    kept, dropped = write_sample_file(tmp_path, 'kept'), write_sample_file(tmp_path, 'dropped')
    plane.ensure_buffer(learner_task('b', size=3))
    plane.push('t', 'b', metadata('dropped', 3))
    plane.push('t', 'b', metadata('kept', 3))  # the ring of 3 forgets the 'dropped' samples
    assert plane.collect_data_garbage(min_age=3600.0) == 0  # too young: a learner may still read it
    assert plane.collect_data_garbage(min_age=0.0) == 1
    assert not os.path.exists(dropped) and not os.path.exists(manifest_path(dropped))
    assert os.path.exists(kept) and os.path.exists(foreign)
    plane.stop()
    plane.close(keep_data=False)  # the end of the run: every file that came through it goes
    assert not os.path.exists(kept) and os.path.exists(foreign)
    assert plane.buffer_status('b') == (False, True)


def test_an_answer_for_a_closed_buffer_drops_its_files(tmp_path):
    plane, _, lines = make_plane(tmp_path)
    late = write_sample_file(tmp_path, 'late')
    plane.ensure_buffer(learner_task('b'))
    plane.close_buffer('b')
    plane.push('t', 'b', metadata('late', 2) + [{'data_id': '../outside#0'}])
    assert not os.path.exists(late)
    assert any('no replay buffer b, 3 samples dropped' in line for line in lines)
    assert plane.pushed_samples == 0
    plane.stop()
    plane.close(keep_data=False)


def test_with_a_replay_server_the_buffer_counts_the_inserted_samples_and_answers_tickets(tmp_path):
    plane, _, lines = make_plane(tmp_path)
    task = {
        'buffer_id': 'b0',
        'replay_buffer_cfg': {'type': 'advanced', 'replay_buffer_size': 100, 'replay_address': '127.0.0.1:50051'},
    }
    plane.ensure_buffer(task)
    assert 'replay buffer b0: the replay service at 127.0.0.1:50051' in lines
    plane.push('c0', 'b0', [{'data_id': REPLAY_DATA_ID, 'collect_iter': 0}] * 3)
    assert plane.pushed_samples == 3 and plane.sample('b0', 4, cur_learner_iter=7) is None
    plane.push('c0', 'b0', [{'data_id': REPLAY_DATA_ID, 'collect_iter': 0}] * 200)
    assert plane.buffer_size('b0') == 100  # as many as the server's buffer keeps
    tickets = plane.sample('b0', 4, cur_learner_iter=7)
    assert tickets == [{'data_id': REPLAY_DATA_ID, 'policy_iter': 7}] * 4
    plane.close(keep_data=False)
    assert os.listdir(tmp_path / 'data') == []
