"""NaN guard: keep one bad batch from destroying a training run.

The guard registers a step pre-hook on the policy's optimizer(s) (``Optimizer.register_step_pre_hook``).
Before each step it checks that every gradient is finite (one fused norm kernel over all gradients and a
single host sync). A NaN or infinite loss gives non-finite gradients too, so the loss needs no separate
check. On a bad step it

1. drops the gradients, so the step updates nothing (the parameters stay as they were),
2. multiplies the learning rate of every param group by ``lr_cut_factor``,
3. counts the event, logs it and reports it (learner log buffer, tensorboard, metrics).

After ``max_consecutive_bad`` bad steps in a row it rolls the policy back to the newest valid
checkpoint of the learner's checkpoint directory (model, optimizer and the learner's iteration
counter; the cut learning rate is kept). ``max_rollbacks`` rollbacks without a good step in
between stop training with ``NanGuardError`` rather than spin forever.

Use it through the learner config (on by default)::

    policy.learn.learner.nan_guard = dict(enable=True, lr_cut_factor=0.5, max_consecutive_bad=3,
                                          rollback=True, max_rollbacks=3)

or as a full-form hook ``dict(type='nan_guard', position='before_run', ext_args=dict(...))``, or
directly with ``install_nan_guard(learner)`` for a learner driven without ``before_run``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from ding.utils.checkpoint import CheckpointError, latest_valid_checkpoint, load_checkpoint
from ding.utils.pytorch_ddp_dist_helper import any_rank, broadcast_state

from .checkpoint_hooks import checkpoint_dir
from .hook_base import LearnerHook, iterations_done, register_learner_hook
from .nan_guard_settings import (
    DEFAULT_OPTIMIZER_NAMES,
    EVENT_KINDS,
    NAN_GUARD_DEFAULTS,
    ROLLBACK,
    ROLLBACK_FAILED,
    SKIPPED_STEP,
    NanGuardListener,
    add_nan_guard_listener,
    check_nan_guard_config,
    publish_event,
    remove_nan_guard_listener,
)

# Names of the per-iteration values put in the learner's scalar log buffer.
LOG_SKIPPED = 'nan_guard_skipped_steps'
LOG_ROLLBACKS = 'nan_guard_rollbacks'

_LOG = logging.getLogger('ding.nan_guard')


class NanGuardError(RuntimeError):
    """Training keeps producing non-finite gradients even after rolling back; stopping is the only safe move."""


def grads_finite(grads: list[torch.Tensor]) -> bool:
    """True when every tensor of ``grads`` is finite: one fused norm kernel per device and one host sync.

    A norm is finite exactly when every value is; the norms are taken in float64, so the finite values of
    float32 / float16 gradients never overflow into a false alarm. Gradients the fused kernel cannot take
    (sparse ones) are checked one by one.
    """
    if not grads:
        return True
    device = grads[0].device
    try:
        norms = torch._foreach_norm(grads, 2, dtype=torch.float64)  # noqa: SLF001 - torch._foreach_* are allowed
        return math.isfinite(torch.stack([n.to(device) for n in norms]).sum().item())
    except (RuntimeError, TypeError, NotImplementedError):
        return all(bool(torch.isfinite(g.coalesce().values() if g.is_sparse else g).all()) for g in grads)


def _all_finite(state: Any) -> bool:
    if isinstance(state, torch.Tensor):
        return not state.is_floating_point() or bool(torch.isfinite(state).all())
    if isinstance(state, dict):
        return all(_all_finite(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return all(_all_finite(v) for v in state)
    if isinstance(state, float):
        return math.isfinite(state)
    return True


class NanGuard:
    """The guard's state and logic; hooks and ``install_nan_guard`` attach it to a learner."""

    def __init__(
        self,
        lr_cut_factor: float = 0.5,
        max_consecutive_bad: int = 3,
        rollback: bool = True,
        max_rollbacks: int = 3,
        optimizer_names: Sequence[str] = DEFAULT_OPTIMIZER_NAMES,
    ) -> None:
        cfg = check_nan_guard_config(
            dict(
                lr_cut_factor=lr_cut_factor,
                max_consecutive_bad=max_consecutive_bad,
                rollback=rollback,
                max_rollbacks=max_rollbacks,
                optimizer_names=optimizer_names,
            ),
            'nan_guard',
        )
        self.lr_cut_factor = float(cfg['lr_cut_factor'])
        self.max_consecutive_bad = cfg['max_consecutive_bad']
        self.rollback_enabled = cfg['rollback']
        self.max_rollbacks = cfg['max_rollbacks']
        self.optimizer_names = cfg['optimizer_names']
        self.events: dict[str, int] = {k: 0 for k in EVENT_KINDS}
        self.consecutive_bad = 0
        self.rollbacks_since_good = 0
        self.last_rollback_path: str | None = None
        self._engine: Any = None
        # (name, optimizer, the handle of the step pre-hook that guards it)
        self._guarded: list[tuple[str, torch.optim.Optimizer, RemovableHandle]] = []
        self._skipped_this_iter = 0
        self._rollbacks_this_iter = 0
        self._rollback_pending = False

    @classmethod
    def from_config(cls, cfg: dict[str, Any], where: str = 'nan_guard') -> NanGuard:
        c = check_nan_guard_config(dict(cfg), where)
        return cls(
            c['lr_cut_factor'], c['max_consecutive_bad'], c['rollback'], c['max_rollbacks'], c['optimizer_names']
        )

    # ---- attaching --------------------------------------------------------------------------------
    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [opt for _, opt, _ in self._guarded]

    def attach(self, engine: Any) -> None:
        """Guard ``step()`` of every optimizer the learner's policy holds (idempotent): a step pre-hook checks
        the gradients and, when one is not finite, drops them all (``zero_grad(set_to_none=True)``), so the
        step that follows changes no parameter (optimizers skip parameters without a gradient). The
        gradients of a step given a closure are the closure's, which the hook does not see."""
        self._engine = engine
        if hasattr(engine, 'nan_guard'):
            engine.nan_guard = self
        policy = engine.policy
        if policy is None:
            raise RuntimeError(f'{engine.instance_name}: the NaN guard needs a policy; set learner.policy first')
        found = []
        for name in self.optimizer_names:
            try:
                opt = policy.get_attribute(name)
            except (AttributeError, KeyError):
                continue
            if isinstance(opt, torch.optim.Optimizer):
                found.append((name, opt))
        # A policy may have rebuilt its optimizer (e.g. in load_state_dict): forget the stale ones.
        current = {id(opt) for _, opt in found}
        for _, opt, handle in self._guarded:
            if id(opt) not in current:
                handle.remove()
        self._guarded = [g for g in self._guarded if id(g[1]) in current]
        guarded = {id(opt) for _, opt, _ in self._guarded}
        for name, opt in found:
            if id(opt) not in guarded:
                self._guard(name, opt)
        if not found:
            engine.info(
                f'nan_guard: no optimizer found on the policy (looked for attributes '
                f'{list(self.optimizer_names)}); the guard is inactive'
            )

    def _guard(self, name: str, opt: torch.optim.Optimizer) -> None:
        def check_gradients(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            grads = [p.grad for group in optimizer.param_groups for p in group['params'] if p.grad is not None]
            if grads_finite(grads):
                self.consecutive_bad = 0
                self.rollbacks_since_good = 0
            else:
                self._on_bad_step(name, optimizer)  # drops the gradients: the step changes nothing

        self._guarded.append((name, opt, opt.register_step_pre_hook(check_gradients)))

    def detach(self) -> None:
        """Remove the guard from every optimizer it guards."""
        for _, _, handle in self._guarded:
            handle.remove()
        self._guarded = []

    # ---- events -----------------------------------------------------------------------------------
    def _on_bad_step(self, name: str, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad(set_to_none=True)
        old_lr = _first_lr(opt)
        if self.lr_cut_factor != 1.0:
            for group in opt.param_groups:
                group['lr'] = group['lr'] * self.lr_cut_factor
        self.consecutive_bad += 1
        self._skipped_this_iter += 1
        self.events[SKIPPED_STEP] += 1
        publish_event(SKIPPED_STEP)
        engine = self._engine
        it = engine.last_iter.val if engine is not None else -1
        msg = (
            f'nan_guard: non-finite gradient at iteration {it} (optimizer {name!r}): skipped the optimizer '
            f'step, lr {old_lr:.4g} -> {_first_lr(opt):.4g}; {self.consecutive_bad}/{self.max_consecutive_bad} '
            f'consecutive bad steps, {self.events[SKIPPED_STEP]} skipped in total'
        )
        if self.rollback_enabled and self.consecutive_bad >= self.max_consecutive_bad:
            self._rollback_pending = True
            msg += '; rolling back to the last good checkpoint after this iteration'
        self._warn(msg)
        self._tb_event(SKIPPED_STEP)

    def _warn(self, msg: str) -> None:
        engine = self._engine
        logger = getattr(engine, 'logger', None)
        if logger is not None:
            logger.warning(f'[RANK{getattr(engine, "rank", 0)}]: {msg}')
        else:
            _LOG.warning(msg)

    def _tb_event(self, kind: str) -> None:
        engine = self._engine
        if engine is None or getattr(engine, 'rank', 0) != 0:
            return
        try:
            tb = engine.tb_logger
        except Exception:  # no tensorboard available: the text log and counters still have it
            return
        if tb is not None:
            tb.add_scalar(f'{engine.instance_name}_nan_guard/{kind}_total', self.events[kind], iterations_done(engine))

    # ---- per-iteration report and rollback ------------------------------------------------------
    def after_iter(self, engine: Any) -> None:
        """Put this iteration's counts in the log buffer; roll back when a rollback is pending."""
        if self._rollback_pending:
            self._rollback_pending = False
            self.rollback(engine)
        scalar = engine.log_buffer['scalar']
        # Plain ints need none of LogDict's conversions (this runs every iteration).
        dict.__setitem__(scalar, LOG_SKIPPED, self._skipped_this_iter)
        dict.__setitem__(scalar, LOG_ROLLBACKS, self._rollbacks_this_iter)
        self._skipped_this_iter = 0
        self._rollbacks_this_iter = 0

    def rollback(self, engine: Any) -> str | None:
        """Load the newest valid checkpoint of the learner into its policy; returns its path or None.

        Restores model and optimizer state and the iteration counter; keeps the current (cut)
        learning rates, the collector env-step count and the RNG streams (replaying the same random
        draws would likely replay the same bad batch).
        """
        self._engine = engine
        self.consecutive_bad = 0
        if self.max_rollbacks and self.rollbacks_since_good >= self.max_rollbacks:
            msg = (
                f'nan_guard: {self.rollbacks_since_good} rollbacks without a single good optimizer step since; '
                f'training keeps diverging (last checkpoint used: {self.last_rollback_path}). Stopping.'
            )
            self._warn(msg)
            raise NanGuardError(msg)
        directory = checkpoint_dir(engine)
        path = latest_valid_checkpoint(directory)
        state = None
        if path is not None:
            try:
                state = dict(load_checkpoint(path, map_location='cpu'))
            except CheckpointError as exc:
                self._warn(f'nan_guard: cannot read checkpoint for rollback: {exc}')
        if state is not None and not _all_finite({k: v for k, v in state.items() if k != 'extra_state'}):
            self._warn(f'nan_guard: checkpoint {path} holds non-finite values; not rolling back to it')
            state = None
        if engine.world_size > 1:
            # Every rank rolls back at the same step (the averaged gradients are non-finite on all of them), but
            # only rank 0 writes checkpoints: the others take rank 0's, so the ranks stay identical.
            state = broadcast_state(state) if any_rank(engine.rank == 0 and state is not None) else None
            path = path if engine.rank == 0 else f"rank 0's {path or 'checkpoint'}"
        if state is None:
            self.events[ROLLBACK_FAILED] += 1
            publish_event(ROLLBACK_FAILED)
            self._warn(
                f'nan_guard: no usable checkpoint in {directory} to roll back to; going on with the current '
                f'(finite) parameters and the reduced learning rate'
            )
            self._tb_event(ROLLBACK_FAILED)
            return None
        last_iter = state.pop('last_iter', None)
        for key in ('last_step', 'rng_state', 'config_hash', 'extra_state'):
            state.pop(key, None)
        lrs = [[g['lr'] for g in opt.param_groups] for opt in self.optimizers]
        engine.policy.load_state_dict(state)
        self.attach(engine)  # in case the policy rebuilt an optimizer while loading
        for opt, group_lrs in zip(self.optimizers, lrs):
            if len(group_lrs) == len(opt.param_groups):
                for group, lr in zip(opt.param_groups, group_lrs):
                    group['lr'] = lr
        old_iter = iterations_done(engine)
        if last_iter is not None:
            # Inside after_iter the learner still adds 1 for the iteration that just ran.
            offset = old_iter - engine.last_iter.val
            engine.last_iter.update(int(last_iter) - offset)
        self.rollbacks_since_good += 1
        self._rollbacks_this_iter += 1
        self.last_rollback_path = path
        self.events[ROLLBACK] += 1
        publish_event(ROLLBACK)
        self._warn(
            f'nan_guard: rolled back to {path} (iteration {old_iter} -> {iterations_done(engine)}) after '
            f'{self.max_consecutive_bad} consecutive bad steps; rollback {self.events[ROLLBACK]} in total'
        )
        self._tb_event(ROLLBACK)
        return path


def _first_lr(opt: torch.optim.Optimizer) -> float:
    lr = opt.param_groups[0]['lr'] if opt.param_groups else float('nan')
    return float(lr)


class NanGuardHook(LearnerHook):
    """``before_run``: attach a ``NanGuard`` (built from ``ext_args``) to the learner's optimizers and
    register its ``after_iter`` companion, which logs the per-iteration counts and runs rollbacks."""

    def __init__(
        self,
        name: str = 'nan_guard',
        priority: float = 15,
        position: str = 'before_run',
        ext_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, position=position, ext_args=ext_args, **kwargs)
        if position != 'before_run':
            raise ValueError(
                f"learner hook '{name}': the NaN guard hook runs at 'before_run' (it installs its own "
                f'after_iter part), got position {position!r}'
            )
        where = f"learner hook '{name}': ext_args"
        self.enabled = check_nan_guard_config(dict(self._ext_args), where)['enable']
        self.guard = NanGuard.from_config(dict(self._ext_args), where=where)
        self.report_hook = _NanGuardReportHook(self)

    def __call__(self, engine: Any) -> None:
        if not self.enabled:
            return
        self.guard.attach(engine)
        if self.report_hook not in engine.hooks['after_iter']:
            engine.register_hook(self.report_hook)


class _NanGuardReportHook(LearnerHook):
    # Priority 15: before log_show (20) so this iteration's counts are in the table it prints.

    def __init__(self, owner: NanGuardHook) -> None:
        super().__init__(owner.name + '_report', 15, position='after_iter')
        self._guard = owner.guard

    def __call__(self, engine: Any) -> None:
        self._guard.after_iter(engine)


def build_nan_guard_hook(
    cfg: dict[str, Any] | None, where: str = 'policy.learn.learner.nan_guard'
) -> NanGuardHook | None:
    """The learner's ``nan_guard`` config section -> a ``NanGuardHook``, or None when disabled."""
    if cfg is None:
        return None
    if not isinstance(cfg, dict):
        raise ValueError(f'{where} must be a dict, got {cfg!r}')
    checked = check_nan_guard_config(dict(cfg), where)
    if not checked.pop('enable'):
        return None
    return NanGuardHook('nan_guard', 15, position='before_run', ext_args=checked)


def install_nan_guard(learner: Any, **kwargs: Any) -> NanGuard:
    """Attach a guard to ``learner`` now (for loops that never call ``before_run``); returns it."""
    hook = NanGuardHook('nan_guard', 15, position='before_run', ext_args=kwargs)
    hook(learner)
    return hook.guard


register_learner_hook('nan_guard', NanGuardHook)

__all__ = [
    'NanGuard',
    'NanGuardHook',
    'NanGuardError',
    'NAN_GUARD_DEFAULTS',
    'build_nan_guard_hook',
    'install_nan_guard',
    'grads_finite',
    'EVENT_KINDS',
    'NanGuardListener',
    'add_nan_guard_listener',
    'remove_nan_guard_listener',
]
