"""``BaseLearner``: runs the policy's learn-mode update and the hooks around it.

Serial use: ``learner.train(batch, envstep)`` once per update (plus ``call_hook('before_run')`` /
``call_hook('after_run')`` around the whole run). Parallel use: set ``learner.get_data`` and call
``start()``, which pulls batches from an ``AsyncDataLoader`` for ``train_iterations`` iterations.
"""

from __future__ import annotations

import copy
import signal
import threading
import traceback
from time import perf_counter
from typing import Any

import torch.distributed as dist
from easydict import EasyDict

from ding.utils.default_helper import CountVar, LogDict
from ding.utils.log_helper import build_logger, close_logger
from ding.utils.registry import LEARNER_REGISTRY, import_module

from .learner_hook import (
    POSITIONS,
    LearnerHook,
    add_learner_hook,
    build_learner_hook_by_cfg,
    iterations_done,
    merge_hooks,
    write_checkpoint,
)
from .nan_guard import build_nan_guard_hook

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _identity(batch: Any) -> Any:
    """Collate function for the data loader: the policy collates a list of samples itself."""
    return batch


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


class LearnerMonitor:
    """Per-key running sums of the scalar log values since the last log show."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.iters = 0
        self.since = perf_counter()

    def update(self, scalars: dict[str, Any]) -> None:
        """Add one iteration's scalar values (non-numbers are skipped)."""
        sums, counts = self.sums, self.counts
        for k, v in scalars.items():
            if v.__class__ is float or v.__class__ is int:  # the common case, without isinstance chains
                sums[k] = sums.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
        self.iters += 1

    def avg(self, key: str) -> float:
        """Mean of ``key`` since the last ``clear()``; KeyError when it was never reported."""
        return self.sums[key] / self.counts[key]

    def averages(self, keys: list[str] | None = None) -> dict[str, float]:
        keys = list(self.sums) if keys is None else keys
        return {k: self.sums[k] / self.counts[k] for k in keys if self.counts.get(k)}

    def clear(self, since: float | None = None) -> None:
        """Start a new window (at ``since``, a ``perf_counter()`` value, default now)."""
        self.sums.clear()
        self.counts.clear()
        self.iters = 0
        self.since = perf_counter() if since is None else since


def _dist_info() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@LEARNER_REGISTRY.register('base')
class BaseLearner:
    """Runs ``policy.forward(data)`` once per ``train`` call, with hooks, logging and checkpoints.

    ``cfg`` is the ``policy.learn.learner`` section; missing keys take ``config``'s defaults.
    ``hook.keep_n`` (an addition to DI-engine's keys) bounds the number of periodic checkpoints kept.
    """

    config = dict(
        train_iterations=int(1e9),
        # num_workers: processes for callable samples; queue_maxsize: batches prepared ahead; refill_at: the
        # loader refills a full queue only once at most this many are left (None: as each one is taken)
        dataloader=dict(num_workers=0, queue_maxsize=2, refill_at=None),
        log_policy=True,
        hook=dict(
            load_ckpt_before_run='',
            log_show_after_iter=100,
            save_ckpt_after_iter=10000,
            save_ckpt_after_run=True,
            keep_n=5,
        ),
        # Skip optimizer steps with non-finite gradients, cut the lr, roll back after repeated ones
        # (ding.worker.learner.nan_guard; an addition to DI-engine's keys).
        nan_guard=dict(enable=True, lr_cut_factor=0.5, max_consecutive_bad=3, rollback=True, max_rollbacks=3),
    )

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def __init__(
        self,
        cfg: dict[str, Any] | None = None,
        policy: Any = None,
        tb_logger: Any = None,
        dist_info: tuple[int, int] | None = None,
        exp_name: str = 'default_experiment',
        instance_name: str = 'learner',
    ) -> None:
        if cfg is not None and not isinstance(cfg, dict):
            raise TypeError(
                f'BaseLearner: cfg must be a dict (the policy.learn.learner section), got {type(cfg).__name__}'
            )
        self._cfg = EasyDict(_deep_merge(dict(copy.deepcopy(self.config)), dict(cfg or {})))
        iters = self._cfg.train_iterations
        if isinstance(iters, bool) or not isinstance(iters, (int, float)) or iters < 0 or iters != int(iters):
            raise ValueError(f"learner config 'train_iterations' must be an int >= 0, got {iters!r}")
        self._cfg.train_iterations = int(iters)
        self._exp_name = exp_name
        self._instance_name = instance_name
        if dist_info is None:
            self._rank, self._world_size = _dist_info()
        else:
            try:
                self._rank, self._world_size = (int(x) for x in dist_info)
            except (TypeError, ValueError):
                raise ValueError(f'BaseLearner: dist_info must be (rank, world_size), got {dist_info!r}') from None
        if self._world_size > 1 and not self._cfg.hook.get('log_reduce_after_iter'):
            self._cfg.hook.log_reduce_after_iter = True

        # Hooks first: a bad hook config fails before any file is opened.
        self._hooks: dict[str, list[LearnerHook]] = {p: [] for p in POSITIONS}
        self._nan_guard: Any = None  # set by the NaN guard hook when it attaches (before_run)
        # name -> getter of extra state written into every checkpoint (see write_checkpoint).
        self.checkpoint_extras: dict[str, Any] = {}
        self._setup_hook()

        self._log_dir = f'./{exp_name}/log/{instance_name}'
        self._logger, _ = build_logger(self._log_dir, instance_name, need_tb=False)
        # A tensorboard writer is created on first use: a learner given one, or never logging, makes no file.
        self._tb_logger = tb_logger
        self._owns_tb_logger = False

        self._log_buffer = {'scalar': LogDict(), 'scalars': LogDict(), 'histogram': LogDict()}
        self._monitor = LearnerMonitor()
        self._hook_time: dict[str, list] = {}  # hook name -> [seconds, calls, position] since last show
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
        self._stop_signal: int | None = None
        self._dataloader = None
        self._policy = None
        if policy is not None:
            self.policy = policy

    def _setup_hook(self) -> None:
        hooks = build_learner_hook_by_cfg(self._cfg.hook)
        guard = build_nan_guard_hook(self._cfg.get('nan_guard'))
        if guard is not None:
            add_learner_hook(hooks, guard)
        self._hooks = merge_hooks(self._hooks, hooks)

    # ---- hooks ---------------------------------------------------------------------------------------
    def register_hook(self, hook: LearnerHook) -> None:
        """Add ``hook`` after the hooks of its position with priority <= its own."""
        add_learner_hook(self._hooks, hook)

    def call_hook(self, name: str) -> None:
        """Run the hooks of position ``name`` in order, timing each one."""
        hooks = self._hooks.get(name)
        if hooks is None:
            raise ValueError(f'call_hook: unknown position {name!r}; valid positions are {list(self._hooks)}')
        times = self._hook_time
        for hook in hooks:
            t0 = perf_counter()
            hook(self)
            dt = perf_counter() - t0
            rec = times.get(hook.name)
            if rec is None:
                times[hook.name] = [dt, 1, name]
            else:
                rec[0] += dt
                rec[1] += 1

    # ---- training ------------------------------------------------------------------------------------
    def train(self, data: Any, envstep: int = -1, policy_kwargs: dict[str, Any] | None = None) -> Any:
        """One iteration: ``before_iter`` hooks, ``policy.forward(data)``, log routing, ``after_iter`` hooks.

        ``data`` is a list of sample dicts or a collated batch dict. ``envstep`` >= 0 updates
        ``collector_envstep``. Returns the policy's log vars (without ``priority`` and the
        ``[histogram]`` / ``[scalars]`` keys). A policy may return a list of log dicts (several
        updates in one forward); each then counts as one iteration.
        """
        policy = self._policy
        if policy is None:
            raise RuntimeError('BaseLearner.train: no policy; set learner.policy = policy.learn_mode first')
        if envstep >= 0:
            self._collector_envstep = envstep
        hooks = self._hooks
        if hooks['before_iter']:
            self.call_hook('before_iter')
        if policy_kwargs:
            log_vars = policy.forward(data, **policy_kwargs)
        else:
            log_vars = policy.forward(data)
        if isinstance(log_vars, dict):
            priority = log_vars.pop('priority', None)
            if priority is not None:
                self._set_priority_info(priority, data)
            self._record(log_vars)
            self._end_iter(hooks['after_iter'])
        elif isinstance(log_vars, list) and all(isinstance(e, dict) for e in log_vars):
            priority = log_vars[-1].pop('priority', None) if log_vars else None
            if priority is not None:
                self._set_priority_info(priority, data)
            for elem in log_vars:
                self._record(elem)
                self._end_iter(hooks['after_iter'])
        else:
            raise TypeError(
                f'BaseLearner.train: policy forward must return a dict (or a list of dicts) '
                f'of log values, got {type(log_vars).__name__}'
            )
        return log_vars

    def _end_iter(self, after_iter: list[LearnerHook]) -> None:
        if after_iter:
            self._in_after_iter = True
            times = self._hook_time
            try:
                # call_hook('after_iter'), inlined: this runs every iteration.
                for hook in after_iter:
                    t0 = perf_counter()
                    hook(self)
                    dt = perf_counter() - t0
                    rec = times.get(hook.name)
                    if rec is None:
                        times[hook.name] = [dt, 1, 'after_iter']
                    else:
                        rec[0] += dt
                        rec[1] += 1
            finally:
                self._in_after_iter = False
        self._last_iter.add(1)

    def _record(self, log_vars: dict[str, Any]) -> None:
        """Route ``[histogram]`` / ``[scalars]`` keys to their buffers, the rest to the scalar buffer."""
        scalar = self._log_buffer['scalar']
        set_plain = dict.__setitem__  # python floats need none of LogDict's conversions
        routed = None
        for k, v in log_vars.items():
            if k.startswith('['):
                if routed is None:
                    routed = []
                routed.append(k)
            elif v.__class__ is float:
                set_plain(scalar, k, v)
            else:
                scalar[k] = v
        if routed is not None:
            for k in routed:
                if k.startswith('[histogram]'):
                    self._log_buffer['histogram'][k[len('[histogram]') :]] = log_vars.pop(k)
                elif k.startswith('[scalars]'):
                    self._log_buffer['scalars'][k[len('[scalars]') :]] = log_vars.pop(k)
                else:  # some other bracketed name: an ordinary scalar
                    scalar[k] = log_vars[k]

    def _set_priority_info(self, priority: Any, data: Any) -> None:
        if isinstance(data, dict):
            idx = data.get('replay_buffer_idx')
            uid = data.get('replay_unique_id')
            idx = idx.tolist() if hasattr(idx, 'tolist') else idx
            uid = uid.tolist() if hasattr(uid, 'tolist') else uid
        else:
            idx = [d.get('replay_buffer_idx') for d in data]
            uid = [d.get('replay_unique_id') for d in data]
        self._priority_info = {'priority': priority, 'replay_buffer_idx': idx, 'replay_unique_id': uid}

    # ---- parallel mode -------------------------------------------------------------------------------
    def setup_dataloader(self) -> None:
        """Build the ``AsyncDataLoader`` ``start()`` reads from, over ``self.get_data(batch_size)``."""
        get_data = getattr(self, 'get_data', None)
        if get_data is None:
            raise RuntimeError(
                'BaseLearner.setup_dataloader: set learner.get_data = fn(batch_size) first '
                '(the comm learner does this in parallel mode)'
            )
        if self._policy is None:
            raise RuntimeError('BaseLearner.setup_dataloader: no policy; set learner.policy first')
        from ding.utils.data_loader import AsyncDataLoader

        cfg = self._cfg.dataloader
        batch_size = self._policy.get_attribute('batch_size')
        device = self._policy.get_attribute('device')
        self._dataloader = AsyncDataLoader(
            get_data,
            batch_size,
            device,
            chunk_size=cfg.get('chunk_size', batch_size),
            collate_fn=_identity,
            num_workers=cfg.get('num_workers', 0),
            queue_maxsize=cfg.get('queue_maxsize', 2),
            refill_at=cfg.get('refill_at'),
        )

    def start(self) -> None:
        """Train for ``train_iterations`` iterations on data from the data loader.

        Runs ``before_run`` hooks first and ``after_run`` hooks last. SIGINT / SIGTERM (main thread
        only) stop the loop after the current iteration and write ``interrupt_iteration_{n}``. Any
        exception writes ``exception_iteration_{n}``, is logged with its traceback and re-raised.
        """
        if self._policy is None:
            raise RuntimeError('BaseLearner.start: no policy; set learner.policy first')
        if self._dataloader is None:
            self.setup_dataloader()
        self._end_flag = False
        self._learner_done = False
        self._stop_signal = None
        previous = self._install_signal_handlers()
        try:
            self.call_hook('before_run')
            scalar = self._log_buffer['scalar']
            loader = self._dataloader
            for _ in range(self._cfg.train_iterations):
                if self._end_flag or self._stop_signal is not None:
                    break
                t0 = perf_counter()
                try:
                    data = next(loader)
                except BaseException:
                    if self._end_flag:  # close() from another thread stopped the loader under us
                        break
                    raise
                if self._end_flag or self._stop_signal is not None:
                    break
                scalar['data_time'] = perf_counter() - t0
                self.train(data)
            if self._stop_signal is not None:
                name = signal.Signals(self._stop_signal).name
                path = self.save_checkpoint(f'interrupt_iteration_{self._last_iter.val}')
                self.info(f'{name} received: stopped after iteration {self._last_iter.val}; checkpoint: {path}')
            else:
                self._learner_done = True
            self.call_hook('after_run')
        except BaseException as exc:
            self._save_exception_checkpoint(exc)
            raise
        finally:
            self._restore_signal_handlers(previous)

    def stop(self) -> None:
        """Ask a running ``start()`` to leave its loop after the current iteration (closes nothing).

        ``start()`` checks before and after each ``next(loader)``, so a loop waiting for data stops
        once the next batch (or an error) arrives; ``after_run`` hooks still run.
        """
        self._end_flag = True

    def _save_exception_checkpoint(self, exc: BaseException) -> None:
        n = self._last_iter.val
        tb_text = ''.join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self._logger.error(f'[RANK{self._rank}]: learner failed at iteration {n}:\n{tb_text}')
        try:
            path = self.save_checkpoint(f'exception_iteration_{n}')
        except Exception as save_exc:  # keep the original exception the one that propagates
            self._logger.error(f'[RANK{self._rank}]: could not write the exception checkpoint: {save_exc!r}')
        else:
            if path is not None:
                self.info(f'exception checkpoint written: {path}')

    def _install_signal_handlers(self) -> dict[int, Any] | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        previous = {}
        for sig in _STOP_SIGNALS:
            previous[sig] = signal.signal(sig, self._on_stop_signal)
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any] | None) -> None:
        if previous:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        if self._stop_signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C does not wait for the iteration to end
        self._stop_signal = signum

    # ---- checkpoints, logging, teardown --------------------------------------------------------------
    def save_checkpoint(self, ckpt_name: str | None = None) -> str | None:
        """Write a checkpoint now (``iteration_{n}`` unless ``ckpt_name`` is given); returns its path.

        Only rank 0 writes (others get None). Needs no save hook to be configured.
        """
        if ckpt_name is not None:
            self._ckpt_name = ckpt_name
        try:
            return write_checkpoint(self, iterations_done(self))
        finally:
            self._ckpt_name = None

    def info(self, s: str) -> None:
        self._logger.info(f'[RANK{self._rank}]: {s}')

    def debug(self, s: str) -> None:
        self._logger.debug(f'[RANK{self._rank}]: {s}')

    def close(self) -> None:
        """Stop ``start()``'s loop, close the data loader and loggers. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._end_flag = True
        if self._dataloader is not None:
            self._dataloader.close()
        if self._tb_logger is not None:
            self._tb_logger.flush()
            if self._owns_tb_logger:
                self._tb_logger.close()
        close_logger(self._logger)

    def __del__(self) -> None:
        # Only release what can leak across processes / files; the text logger is shared by name.
        if getattr(self, '_closed', True):
            return
        try:
            if self._dataloader is not None:
                self._dataloader.close()
            if self._owns_tb_logger and self._tb_logger is not None:
                self._tb_logger.close()
        except Exception:
            pass

    # ---- properties ----------------------------------------------------------------------------------
    @property
    def policy(self) -> Any:
        return self._policy

    @policy.setter
    def policy(self, _policy: Any) -> None:
        """Accept a learn-mode view (or a whole ``Policy``, whose learn mode is taken)."""
        if hasattr(_policy, 'learn_mode') and not hasattr(_policy, 'forward'):
            _policy = _policy.learn_mode
        if not callable(getattr(_policy, 'forward', None)):
            raise TypeError(f"BaseLearner.policy: expected a policy's learn_mode (with forward), got {_policy!r}")
        self._policy = _policy
        if self._cfg.log_policy and self._rank == 0:
            self.info(str(_policy.info()) if callable(getattr(_policy, 'info', None)) else repr(_policy))

    @property
    def learn_info(self) -> dict[str, Any]:
        return {
            'learner_step': self._last_iter.val,
            'priority_info': self._priority_info,
            'learner_done': self._learner_done,
        }

    @property
    def priority_info(self) -> dict[str, Any]:
        return self._priority_info

    @priority_info.setter
    def priority_info(self, value: dict[str, Any]) -> None:
        self._priority_info = value

    @property
    def dataloader(self) -> Any:
        """The ``AsyncDataLoader`` ``start()`` reads from; None before it is set up (and in serial mode)."""
        return self._dataloader

    @property
    def last_checkpoint(self) -> tuple[int, str] | None:
        """``(iteration, path)`` of the newest checkpoint this learner wrote, or None."""
        return self._last_ckpt

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
    def hook_time(self) -> dict[str, list]:
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


def create_learner(cfg: dict[str, Any], **kwargs: Any) -> BaseLearner:
    """Build the learner registered as ``cfg.type`` (default ``'base'``), importing ``cfg.import_names``."""
    import_module(cfg.get('import_names', []))
    return LEARNER_REGISTRY.build(cfg.get('type', 'base'), cfg=cfg, **kwargs)
