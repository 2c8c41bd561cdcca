"""The counters a resumed parallel run continues from, kept in ``./{exp_name}/coordinator_state.json``."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeGuard

from .data_plane import DataPlane

STATE_FILE = 'coordinator_state.json'  # under ./{exp_name}/: the counters a resumed run continues from


class RunStateFile:
    """The run's counters: the commander's (env steps), the learner iteration and the samples pushed; written
    atomically as the run goes and read back when a run resumes."""

    def __init__(
        self,
        exp_name: str,
        commander: Any,
        commander_lock: threading.RLock,
        progress: LearnProgress,
        data: DataPlane,
        info: Callable[[str], None],
        error: Callable[[str], None],
    ) -> None:
        self._exp_name = exp_name
        self._commander = commander
        self._commander_lock = commander_lock
        self._progress = progress
        self._data = data
        self._info = info
        self._error = error
        self._saved_at = 0.0

    def state_dict(self) -> dict[str, Any]:
        with self._commander_lock:
            state = dict(self._commander.state_dict()) if hasattr(self._commander, 'state_dict') else {}
            env_step = int(getattr(self._commander, 'total_collector_env_step', 0))
        state.update(env_step=env_step, train_iter=self._progress.train_iter, pushed_samples=self._data.pushed_samples)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._commander_lock:
            if hasattr(self._commander, 'load_state_dict'):
                self._commander.load_state_dict(state)
        self._progress.resume_from(int(state.get('train_iter', 0) or 0))
        self._data.pushed_samples = int(state.get('pushed_samples', 0) or 0)

    @property
    def path(self) -> str:
        """``./{exp_name}/coordinator_state.json``."""
        return os.path.join('.', self._exp_name, STATE_FILE)

    def save(self, min_interval: float = 0.0) -> str | None:
        """Write ``state_dict()`` (temp file, fsync, rename: a kill never leaves half a file); skipped when the
        last write is less than ``min_interval`` s old. Returns the path if written."""
        now = time.time()
        if now - self._saved_at < min_interval:
            return None
        self._saved_at = now
        content = dict(self.state_dict(), time=now, exp_name=self._exp_name)
        path = self.path
        tmp = f'{path}.{os.getpid()}.tmp'
        try:
            with open(tmp, 'w', encoding='utf-8') as f:
                json.dump(content, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:  # the run goes on; only a later resume would start its counters older
            self._error(f'cannot write {path}: {exc}')
            return None
        return path

    def restore(self) -> dict[str, Any] | None:
        """Load the saved counters (returned), or None (logged) when there are none or they cannot be read."""
        path = self.path
        try:
            with open(path, encoding='utf-8') as f:
                state = json.load(f)
        except FileNotFoundError:
            self._info(f'resume: no {path}; env steps start from 0')
            return None
        except (OSError, ValueError) as exc:
            self._error(f'resume: cannot read {path} ({exc}); env steps start from 0')
            return None
        if not isinstance(state, dict):
            self._error(f'resume: {path} holds no object; env steps start from 0')
            return None
        self.load_state_dict(state)
        self._info(
            f'resume: continuing from {path}: env_step {state.get("env_step")}, train_iter {state.get("train_iter")}'
        )
        return state


class LearnProgress:
    """The learner's progress as its learn infos report it: iteration, policy lag, stale samples dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.train_iter = 0
        self.learn_info_count = 0
        self.policy_lag: dict[str, float] = {}
        self.stale_dropped = 0

    def record(self, info: dict[str, Any]) -> int:
        """Count one training iteration's learn info; returns how many were counted so far."""
        with self._lock:
            step = info.get('learner_step', info.get('policy_iter'))
            if _is_number(step):
                self.train_iter = max(self.train_iter, int(step))
            self.learn_info_count += 1
            lag = info.get('policy_lag')
            if isinstance(lag, dict):
                self.policy_lag = lag
            dropped = info.get('stale_dropped')
            if _is_number(dropped):
                self.stale_dropped += int(dropped)
            return self.learn_info_count

    def resume_from(self, train_iter: int) -> None:
        with self._lock:
            self.train_iter = max(self.train_iter, train_iter)

    def describe(self) -> str:
        with self._lock:
            return f'iter {self.train_iter}, policy lag {self.policy_lag}, stale dropped {self.stale_dropped}'

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                'train_iter': self.train_iter,
                'learn_info_count': self.learn_info_count,
                'policy_lag': dict(self.policy_lag),
                'stale_dropped': self.stale_dropped,
            }


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
