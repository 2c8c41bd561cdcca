"""The counters a resumed parallel run continues from: written atomically, read back, bad files survived."""

import json
import os
import threading

from easydict import EasyDict

from ding.worker.coordinator.coordinator_config import COORDINATOR_DEFAULTS
from ding.worker.coordinator.data_plane import DataPlane
from ding.worker.coordinator.run_state import STATE_FILE, LearnProgress, RunStateFile


class StepCounter:
    """The one part of a commander the state file uses: its env-step counter and state dict."""

    def __init__(self) -> None:
        self.total_collector_env_step = 0

    def state_dict(self) -> dict:
        return {'total_collector_env_step': self.total_collector_env_step}

    def load_state_dict(self, state: dict) -> None:
        self.total_collector_env_step = int(state['total_collector_env_step'])


def make_state(tmp_path) -> tuple[RunStateFile, StepCounter, LearnProgress, DataPlane, list[str]]:
    os.makedirs(tmp_path / 'exp', exist_ok=True)
    lines: list[str] = []
    counter, progress = StepCounter(), LearnProgress()
    data = DataPlane(
        EasyDict(COORDINATOR_DEFAULTS), str(tmp_path), 'exp', lambda: progress.train_iter, lines.append, lines.append
    )
    state = RunStateFile('exp', counter, threading.RLock(), progress, data, lines.append, lines.append)
    return state, counter, progress, data, lines


def test_counters_round_trip_through_the_state_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    state, counter, progress, data, _ = make_state(tmp_path)
    counter.total_collector_env_step = 640
    progress.record({'learner_step': 30, 'policy_lag': {'max': 2}, 'stale_dropped': 3})
    data.pushed_samples = 700
    path = state.save()
    assert path == os.path.join('.', 'exp', STATE_FILE) and os.listdir('exp') == [STATE_FILE]
    with open(path, encoding='utf-8') as f:
        saved = json.load(f)
    assert (saved['env_step'], saved['train_iter'], saved['pushed_samples']) == (640, 30, 700)
    assert state.save(min_interval=3600.0) is None  # written a moment ago

    fresh, fresh_counter, fresh_progress, fresh_data, lines = make_state(tmp_path)
    assert fresh.restore() is not None
    assert (fresh_counter.total_collector_env_step, fresh_progress.train_iter, fresh_data.pushed_samples) == (
        640,
        30,
        700,
    )
    assert any('continuing from' in line for line in lines)


def test_a_missing_or_broken_state_file_starts_the_counters_from_zero(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    state, counter, progress, _, lines = make_state(tmp_path)
    assert state.restore() is None and 'no ./exp/coordinator_state.json' in lines[-1]
    for text in ('{"env_step": 1', '[1, 2]'):
        with open(state.path, 'w', encoding='utf-8') as f:
            f.write(text)
        assert state.restore() is None
        assert counter.total_collector_env_step == 0 and progress.train_iter == 0


def test_learn_progress_counts_numbers_only():
    progress = LearnProgress()
    assert progress.record({'learner_step': 5, 'stale_dropped': 2}) == 1
    assert progress.record({'policy_iter': 3, 'stale_dropped': True, 'policy_lag': {'max': 1}}) == 2
    assert progress.record({'learner_step': 'seven'}) == 3
    assert progress.snapshot() == {
        'train_iter': 5,
        'learn_info_count': 3,
        'policy_lag': {'max': 1},
        'stale_dropped': 2,
    }
