"""``LearnerState``: what a learner keeps between iterations (iteration and env-step counters, log buffers,
checkpoint bookkeeping, its run flags) and the public properties that read and set it. ``BaseLearner``
builds on it; hooks and the comm learner use these properties, never the attributes behind them."""

from __future__ import annotations

from typing import Any

from easydict import EasyDict

from ding.utils.default_helper import CountVar, LogDict
from ding.utils.log_helper import build_logger

from .hook_base import POSITIONS, LearnerHook
from .learner_monitor import LearnerMonitor


class LearnerState:
    """The state of a learner (see the module doc); ``cfg`` is its completed ``policy.learn.learner`` config."""

    # The checkpoint a comm learner resumed this learner from (None: none); set by whoever resumes it.
    resumed_from: str | None = None
    # Set by BaseLearner once its hooks are built (a bad hook config fails before any file is opened).
    _logger: Any
    _log_dir: str
    _tb_logger: Any
    _owns_tb_logger: bool

    def __init__(self, cfg: EasyDict, exp_name: str, instance_name: str, rank: int, world_size: int) -> None:
        self._cfg = cfg
        self._exp_name = exp_name
        self._instance_name = instance_name
        self._rank, self._world_size = rank, world_size
        self._hooks: dict[str, list[LearnerHook]] = {p: [] for p in POSITIONS}
        self._nan_guard: Any = None  # set by the NaN guard hook when it attaches (before_run)
        # name -> getter of extra state written into every checkpoint (see write_checkpoint).
        self.checkpoint_extras: dict[str, Any] = {}
        # Called with (path, record) after every checkpoint written (e.g. the uploader of the checkpoint section).
        self.checkpoint_listeners: list[Any] = []
        # The uploader storing checkpoints under policy.learn.learner.checkpoint.ckpt_uri (None without one).
        self.checkpoint_uploader: Any = None
        # The whole run's config, for the snapshot in a remote MANIFEST.json (set by the pipeline that has it).
        self.run_config: Any = None
        # Ids of the transitions sampled last (``replay_unique_id``), recorded when ``track_replay_cursor``.
        self.track_replay_cursor = False
        self.replay_cursor: dict[str, Any] | None = None
        self._log_buffer = {'scalar': LogDict(), 'scalars': LogDict(), 'histogram': LogDict()}
        self._monitor = LearnerMonitor()
        self._hook_time: dict[str, list[Any]] = {}  # hook name -> [seconds, calls, position] since last show
        self._last_iter = CountVar(0)
        self._collector_envstep = 0
        self._priority_info: dict[str, Any] = {}
        self._ckpt_name: str | None = None
        self._last_ckpt: tuple[int, str] | None = None
        self._config_hash = ''
        self._in_after_iter = False
        self._end_flag = False
        self._learner_done = False
        self._closed = False

    @property
    def priority_info(self) -> dict[str, Any]:
        return self._priority_info

    @priority_info.setter
    def priority_info(self, value: dict[str, Any]) -> None:
        self._priority_info = value

    @property
    def last_iter(self) -> CountVar:
        return self._last_iter

    @property
    def train_iter(self) -> int:
        return self._last_iter.val

    @property
    def collector_envstep(self) -> int:
        return self._collector_envstep

    @collector_envstep.setter
    def collector_envstep(self, value: int) -> None:
        self._collector_envstep = int(value)

    @property
    def log_buffer(self) -> dict[str, LogDict]:
        return self._log_buffer

    @log_buffer.setter
    def log_buffer(self, value: dict[str, LogDict]) -> None:
        self._log_buffer = value

    @property
    def monitor(self) -> LearnerMonitor:
        return self._monitor

    @property
    def hook_time(self) -> dict[str, list[Any]]:
        """``{hook name: [seconds, calls, position]}`` accumulated since the last log show."""
        return self._hook_time

    @property
    def hooks(self) -> dict[str, list[LearnerHook]]:
        return self._hooks

    @property
    def logger(self) -> Any:
        return self._logger

    @property
    def tb_logger(self) -> Any:
        """The tensorboard writer; created on first access when none was passed in (rank 0 only)."""
        if self._tb_logger is None and self._rank == 0 and not self._closed:
            _, self._tb_logger = build_logger(self._log_dir, self._instance_name, need_tb=True)
            self._owns_tb_logger = True
        return self._tb_logger

    @property
    def nan_guard(self) -> Any:
        """The attached ``NanGuard`` (None until its hook ran at ``before_run``, or when disabled)."""
        return self._nan_guard

    @nan_guard.setter
    def nan_guard(self, guard: Any) -> None:
        self._nan_guard = guard

    @property
    def nan_guard_events(self) -> dict[str, int]:
        """Counts of the NaN guard's events: ``skipped_step``, ``rollback``, ``rollback_failed``."""
        return dict(self._nan_guard.events) if self._nan_guard is not None else {}

    @property
    def in_after_iter(self) -> bool:
        """True while the ``after_iter`` hooks run (``last_iter`` has not advanced yet, see ``iterations_done``)."""
        return self._in_after_iter

    @property
    def stop_requested(self) -> bool:
        """``stop()`` (or ``close()``) was called and ``start()`` has not begun a new loop since."""
        return self._end_flag

    @property
    def last_checkpoint(self) -> tuple[int, str] | None:
        """``(iteration, path)`` of the last checkpoint this learner wrote, None before the first."""
        return self._last_ckpt

    def checkpoint_written(self, iteration: int, path: str, record: dict[str, Any] | None = None) -> None:
        """Record a checkpoint just written for this learner and tell the listeners (``write_checkpoint`` calls
        this; ``record``: name, iteration, envstep, kind, eval_return, replay_cursor)."""
        self._last_ckpt = (int(iteration), path)
        for listener in self.checkpoint_listeners:
            listener(path, record or {'name': path, 'iteration': int(iteration)})

    @property
    def ckpt_name(self) -> str | None:
        return self._ckpt_name

    @ckpt_name.setter
    def ckpt_name(self, value: str | None) -> None:
        self._ckpt_name = value

    @property
    def config_hash(self) -> str:
        """Hash of the run's config, stored in checkpoint manifests (set it with ``config_hash(cfg)``)."""
        return self._config_hash

    @config_hash.setter
    def config_hash(self, value: str) -> None:
        self._config_hash = str(value or '')

    @property
    def cfg(self) -> EasyDict:
        return self._cfg

    @property
    def exp_name(self) -> str:
        return self._exp_name

    @property
    def instance_name(self) -> str:
        return self._instance_name

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size


__all__ = ['LearnerState']
