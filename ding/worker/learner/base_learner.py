"""``BaseLearner``: runs the policy's learn-mode update and the hooks around it (one iteration and the hooks:
``learner_training.LearnerTraining``, its base; here: construction, the parallel-mode loop, checkpoints, teardown).

Serial use: ``learner.train(batch, envstep)`` once per update (plus ``call_hook('before_run')`` /
``call_hook('after_run')`` around the whole run). Parallel use: give the learner its data source and
weight / learn-info sinks (constructor arguments or ``connect``) and call ``start()``, which pulls
batches from an ``AsyncDataLoader`` for ``train_iterations`` iterations.
"""

from __future__ import annotations

import copy
import signal
import traceback
from collections.abc import Callable
from time import perf_counter
from typing import Any

import torch.distributed as dist
from easydict import EasyDict

from ding.config.merge import deep_merge_dicts
from ding.utils.atomic_file import StorageError
from ding.utils.checkpoint_settings import CHECKPOINT_DEFAULTS
from ding.utils.console import CONSOLE_LINE
from ding.utils.data_loader import AsyncDataLoader
from ding.utils.log_helper import build_logger, close_logger
from ding.utils.registry import LEARNER_REGISTRY, import_module

from .checkpoint_hooks import checkpoint_dir, write_checkpoint
from .checkpoint_storage import attach_checkpoint_storage
from .hook_base import add_learner_hook, iterations_done, merge_hooks
from .learner_connections import DataSource, LearnerConnections, LearnInfoSink, PolicySink
from .learner_hook import build_learner_hook_by_cfg
from .learner_monitor import LearnerMonitor
from .learner_training import LearnerTraining
from .nan_guard import build_nan_guard_hook
from .stop_signals import install_stop_handlers, restore_handlers


def _identity(batch: Any) -> Any:
    """Collate function for the data loader: the policy collates a list of samples itself."""
    return batch


def _dist_info() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@LEARNER_REGISTRY.register('base')
class BaseLearner(LearnerTraining, LearnerConnections):
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
        # Checkpoints every N env steps / M minutes, stored under ckpt_uri (a path, s3://, gs://) with
        # MANIFEST.json and latest (ding.worker.learner.checkpoint_storage; an addition to DI-engine's keys).
        checkpoint=copy.deepcopy(CHECKPOINT_DEFAULTS),
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
        data_source: DataSource | None = None,
        policy_sink: PolicySink | None = None,
        learn_info_sink: LearnInfoSink | None = None,
        publish_due: Callable[[], bool] | None = None,
    ) -> None:
        if cfg is not None and not isinstance(cfg, dict):
            raise TypeError(
                f'BaseLearner: cfg must be a dict (the policy.learn.learner section), got {type(cfg).__name__}'
            )
        full_cfg = deep_merge_dicts(self.config, cfg)
        iters = full_cfg.train_iterations
        if isinstance(iters, bool) or not isinstance(iters, (int, float)) or iters < 0 or iters != int(iters):
            raise ValueError(f"learner config 'train_iterations' must be an int >= 0, got {iters!r}")
        full_cfg.train_iterations = int(iters)
        if dist_info is None:
            rank, world_size = _dist_info()
        else:
            try:
                rank, world_size = (int(x) for x in dist_info)
            except (TypeError, ValueError):
                raise ValueError(f'BaseLearner: dist_info must be (rank, world_size), got {dist_info!r}') from None
        if world_size > 1 and not full_cfg.hook.get('log_reduce_after_iter'):
            full_cfg.hook.log_reduce_after_iter = True
        super().__init__(full_cfg, exp_name, instance_name, rank, world_size)

        # Hooks first: a bad hook config fails before any file is opened.
        self._setup_hook()

        self._log_dir = f'./{exp_name}/log/{instance_name}'
        self._logger, _ = build_logger(self._log_dir, instance_name, need_tb=False)
        # A tensorboard writer is created on first use: a learner given one, or never logging, makes no file.
        self._tb_logger = tb_logger
        self._owns_tb_logger = False

        self._stop_signal: int | None = None
        self._dataloader: AsyncDataLoader | None = None
        self.checkpoint_uploader = attach_checkpoint_storage(self, self._cfg.get('checkpoint'))
        self.connect(data_source, policy_sink, learn_info_sink, publish_due)
        self._policy = None
        if policy is not None:
            self.policy = policy

    def _setup_hook(self) -> None:
        hooks = build_learner_hook_by_cfg(self._cfg.hook)
        guard = build_nan_guard_hook(self._cfg.get('nan_guard'))
        if guard is not None:
            add_learner_hook(hooks, guard)
        self._hooks = merge_hooks(self._hooks, hooks)

    # ---- parallel mode -------------------------------------------------------------------------------
    @property
    def dataloader(self) -> AsyncDataLoader | None:
        """The data loader ``start()`` reads from; None before it is set up (and in serial mode)."""
        return self._dataloader

    def setup_dataloader(self) -> None:
        """Build the ``AsyncDataLoader`` ``start()`` reads from, over ``self.get_data(batch_size)``."""
        # DI-engine code assigns learner.get_data = fn directly: that keeps working (it shadows the method).
        get_data = self.get_data
        if self._data_source is None and 'get_data' not in vars(self):
            raise RuntimeError(
                'BaseLearner.setup_dataloader: no get_data; connect a data source first (data_source=fn(batch_size) or '
                'connect(); the comm learner does this in parallel mode)'
            )
        if self._policy is None:
            raise RuntimeError('BaseLearner.setup_dataloader: no policy; set learner.policy first')
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
        previous = install_stop_handlers(self._on_stop_signal)
        try:
            self.call_hook('before_run')
            scalar = self._log_buffer['scalar']
            loader = self._dataloader
            if loader is None:  # setup_dataloader() above builds it
                raise RuntimeError('BaseLearner.start: the data loader was not built')
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
            restore_handlers(previous)

    def stop(self) -> None:
        """Ask a running ``start()`` to leave its loop after the current iteration (closes nothing).

        ``start()`` checks before and after each ``next(loader)``, so a loop waiting for data stops
        once the next batch (or an error) arrives; ``after_run`` hooks still run.
        """
        self._end_flag = True

    def _save_exception_checkpoint(self, exc: BaseException) -> None:
        n = self._last_iter.val
        if isinstance(exc, StorageError):  # one clear line; another checkpoint there would fail the same way
            self._logger.error(f'[RANK{self._rank}]: learner stopped at iteration {n}: {exc}')
            return
        tb_text = ''.join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self._logger.error(f'[RANK{self._rank}]: learner failed at iteration {n}:\n{tb_text}')
        try:
            path = self.save_checkpoint(f'exception_iteration_{n}')
        except Exception as save_exc:  # keep the original exception the one that propagates
            self._logger.error(f'[RANK{self._rank}]: could not write the exception checkpoint: {save_exc!r}')
        else:
            if path is not None:
                self.info(f'exception checkpoint written: {path}')

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

    def info(self, s: str, console: bool = False) -> None:
        """Log ``s`` (to the log file; also to a normal console when ``console``: see ding.utils.console)."""
        self._logger.info(f'[RANK{self._rank}]: {s}', extra=CONSOLE_LINE if console else None)

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
        if self.checkpoint_uploader is not None and not self.checkpoint_uploader.close():
            self._logger.error(
                f'[RANK{self._rank}]: checkpoints not yet stored at {self.checkpoint_uploader.settings.ckpt_uri} '
                f'after {self.checkpoint_uploader.settings.flush_seconds:g} s: {self.checkpoint_uploader.state()}; '
                f'they remain in {checkpoint_dir(self)}'
            )
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


def create_learner(cfg: dict[str, Any], **kwargs: Any) -> BaseLearner:
    """Build the learner registered as ``cfg.type`` (default ``'base'``), importing ``cfg.import_names``."""
    import_module(cfg.get('import_names', []))
    return LEARNER_REGISTRY.build(cfg.get('type', 'base'), cfg=cfg, **kwargs)


__all__ = ['BaseLearner', 'LearnerMonitor', 'create_learner']
