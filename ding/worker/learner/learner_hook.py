"""Learner hooks: small callables the learner runs at four points of its life.

Positions are ``before_run`` / ``after_run`` (around ``start()``, or called by the serial entry) and
``before_iter`` / ``after_iter`` (around every ``train()`` call). Within a position, hooks run in
ascending ``priority``; hooks of equal priority keep the order they were added in.

A hook's ``__call__(engine)`` receives the learner. Inside an ``after_iter`` hook,
``engine.last_iter.val`` is still the number of the iteration that just ran (it advances after the
hooks), so ``engine.last_iter.val + 1`` iterations are complete at that point.
"""

from __future__ import annotations

import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from numbers import Real
from typing import Any

from easydict import EasyDict

from ding.utils.log_helper import pretty_table
from ding.utils.registry import LEARNER_HOOK_REGISTRY
from ding.worker.resume import experiment_ckpt_dir

POSITIONS = ('before_run', 'after_run', 'before_iter', 'after_iter')
# DI-engine's default priority for a full-form hook that does not name one.
DEFAULT_PRIORITY = 100
# Suffixes DI-engine users put on checkpoint names; the checkpoint module adds its own.
_CKPT_SUFFIXES = ('.pth.tar', '.pth', '.safetensors')


class Hook(ABC):
    """Something to run at a fixed point of an engine's life; lower ``priority`` runs first."""

    def __init__(self, name: str, priority: float, **kwargs: Any) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f'hook name must be a non-empty string, got {name!r}')
        if isinstance(priority, bool) or not isinstance(priority, Real) or math.isnan(priority):
            raise ValueError(f"hook '{name}': priority must be a number >= 0, got {priority!r}")
        if priority < 0:
            raise ValueError(f"hook '{name}': priority must be >= 0 (lower runs first), got {priority!r}")
        self._name = name
        self._priority = priority
        # DI-engine's Hook accepted and ignored extra keyword arguments; keep them for subclasses.
        self._kwargs = kwargs

    @property
    def name(self) -> str:
        return self._name

    @property
    def priority(self) -> float:
        return self._priority

    @abstractmethod
    def __call__(self, engine: Any) -> Any:
        """Do the hook's work on ``engine`` (for a ``LearnerHook``: the learner)."""


class LearnerHook(Hook):
    """A hook bound to one of the learner's positions (see ``POSITIONS``)."""

    positions = list(POSITIONS)

    def __init__(
        self,
        name: str,
        priority: float,
        position: str | None = None,
        ext_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, **kwargs)
        if position not in POSITIONS:
            raise ValueError(
                f"learner hook '{name}': unknown position {position!r}; valid positions are {list(POSITIONS)}"
            )
        self._position = position
        # Kept as given (not converted): EasyDict would copy lists the caller may share with the hook.
        self._ext_args = ext_args if ext_args is not None else EasyDict()

    @property
    def position(self) -> str:
        return self._position

    @property
    def ext_args(self) -> dict[str, Any]:
        return self._ext_args

    def __repr__(self) -> str:
        return f'{type(self).__name__}(name={self._name!r}, priority={self._priority}, position={self._position!r})'


# ---- helpers shared by the built-in hooks and the learner ----------------------------------------------
def iterations_done(engine: Any) -> int:
    """Iterations completed so far; inside ``after_iter`` hooks that is ``last_iter.val + 1``."""
    return engine.last_iter.val + (1 if getattr(engine, '_in_after_iter', False) else 0)


def checkpoint_dir(engine: Any) -> str:
    """``./{exp_name}/ckpt`` for the default learner, ``./{exp_name}/ckpt_{instance_name}`` otherwise."""
    return experiment_ckpt_dir(engine.exp_name, engine.instance_name)


def _strip_suffix(name: str) -> str:
    for suffix in _CKPT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def write_checkpoint(engine: Any, iteration: int | None = None) -> str | None:
    """Write the learner's state as ``{checkpoint_dir}/{engine.ckpt_name or iteration_N}``.

    The state is ``policy.state_dict()`` plus ``last_iter``, ``last_step`` (collector env steps),
    ``rng_state`` and, when ``engine.checkpoint_extras`` is set, ``extra_state``; the learner's
    ``config_hash`` goes into the manifest. Only rank 0 writes; other ranks get None. Returns the
    written path.
    """
    if engine.rank != 0:
        return None
    if engine.policy is None:
        raise RuntimeError(f'{engine.instance_name}: cannot save a checkpoint without a policy')
    from ding.utils.checkpoint import get_rng_state, save_checkpoint

    if iteration is None:
        iteration = iterations_done(engine)
    dirname = checkpoint_dir(engine)
    os.makedirs(dirname, exist_ok=True)
    name = _strip_suffix(str(engine.ckpt_name or f'iteration_{iteration}'))
    # A shallow copy: the policy may hand out a dict it keeps using.
    state = dict(engine.policy.state_dict())
    state['last_iter'] = int(iteration)
    state['last_step'] = int(engine.collector_envstep)
    state['rng_state'] = get_rng_state()
    # State of other components (e.g. the serial pipeline's collector and replay buffer), as
    # ``engine.checkpoint_extras = {name: getter}``; LoadCkptHook leaves it to whoever registered it.
    extras = getattr(engine, 'checkpoint_extras', None)
    if extras:
        state['extra_state'] = {k: get() for k, get in extras.items()}
    path = save_checkpoint(os.path.join(dirname, name), state, config_hash=getattr(engine, 'config_hash', '') or '')
    engine._last_ckpt = (int(iteration), path)
    engine.info(f'{engine.instance_name} saved checkpoint {path} (iteration {iteration})')
    return path


# ---- built-in hooks ----------------------------------------------------------------------------------
class LoadCkptHook(LearnerHook):
    """Load ``ext_args.load_path`` into the learner (policy state, iteration, env steps, RNG).

    An empty path does nothing. Reads this project's safetensors checkpoints and DI-engine's
    ``*.pth.tar`` files (tensors only) through ``ding.utils.checkpoint.load_checkpoint``.
    """

    def __init__(self, *args: Any, ext_args: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, ext_args=ext_args, **kwargs)
        path = self._ext_args.get('load_path', '')
        if path is None:
            path = ''
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"learner hook '{self.name}': ext_args.load_path must be a path string, got {path!r}")
        self._load_path = os.fspath(path)

    @property
    def load_path(self) -> str:
        return self._load_path

    def __call__(self, engine: Any) -> None:
        if not self._load_path:
            return
        from ding.utils.checkpoint import load_checkpoint, set_rng_state

        state = dict(load_checkpoint(self._load_path, map_location='cpu'))
        last_iter = state.pop('last_iter', None)
        last_step = state.pop('last_step', None)
        rng_state = state.pop('rng_state', None)
        saved_hash = state.pop('config_hash', None)
        state.pop('extra_state', None)  # not the policy's: see write_checkpoint
        engine.policy.load_state_dict(state)
        if last_iter is not None:
            engine.last_iter.update(int(last_iter))
        if last_step is not None:
            engine.collector_envstep = int(last_step)
        if rng_state is not None:
            set_rng_state(rng_state)
        own_hash = getattr(engine, 'config_hash', '')
        if saved_hash and own_hash and saved_hash != own_hash:
            engine.info(
                f'warning: checkpoint {self._load_path} was written with config hash {saved_hash}, '
                f'this run has {own_hash}'
            )
        engine.info(
            f'{engine.instance_name} loaded checkpoint {self._load_path} '
            f'(iteration {engine.last_iter.val}, env step {engine.collector_envstep})'
        )


class SaveCkptHook(LearnerHook):
    """Save a checkpoint every ``ext_args.freq`` completed iterations (``after_iter``) or at ``after_run``.

    ``ext_args.keep_n`` (after_iter only): keep the newest ``keep_n`` ``iteration_*`` checkpoints of
    the directory, delete older ones; None or 0 keeps them all. Only rank 0 writes. At ``after_run``
    nothing is rewritten when a checkpoint of the same iteration was already written this run.
    """

    def __init__(self, *args: Any, ext_args: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, ext_args=ext_args, **kwargs)
        self._freq = _positive_int(self._ext_args.get('freq', 1), f"learner hook '{self.name}': ext_args.freq")
        keep_n = self._ext_args.get('keep_n', None)
        if keep_n is not None and (isinstance(keep_n, bool) or not isinstance(keep_n, int) or keep_n < 0):
            raise ValueError(f"learner hook '{self.name}': ext_args.keep_n must be an int >= 0 or None, got {keep_n!r}")
        self._keep_n = keep_n or None

    @property
    def freq(self) -> int:
        return self._freq

    def __call__(self, engine: Any) -> None:
        if engine.rank != 0:
            return
        done = iterations_done(engine)
        if self._position == 'after_iter':
            if done % self._freq:
                return
        elif self._position == 'after_run':
            last = getattr(engine, '_last_ckpt', None)
            if last is not None and last[0] == done and not engine.ckpt_name:
                engine.info(f'{engine.instance_name}: checkpoint of iteration {done} already written: {last[1]}')
                return
        write_checkpoint(engine, done)
        if self._keep_n and self._position == 'after_iter':
            from ding.utils.checkpoint import prune_checkpoints

            prune_checkpoints(checkpoint_dir(engine), self._keep_n, prefix='iteration_')


class LogShowHook(LearnerHook):
    """Every ``ext_args.freq`` completed iterations, log the averages since the last show.

    Writes a text table of the averages of the policy's ``monitor_vars()`` (then of any other
    numeric scalar logged, e.g. ``data_time`` in ``start()``), a table of the time each hook took,
    and the same values to tensorboard: ``{instance}_iter/{var}`` (x = iterations),
    ``{instance}_step/{var}`` (x = collector env steps), ``{instance}_hook_time/{hook}`` (ms per
    call), histograms of ``[histogram]`` keys and ``add_scalars`` of ``[scalars]`` keys. At
    ``after_run`` it shows whatever is pending.
    """

    def __init__(self, *args: Any, ext_args: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, ext_args=ext_args, **kwargs)
        self._freq = _positive_int(self._ext_args.get('freq', 1), f"learner hook '{self.name}': ext_args.freq")

    @property
    def freq(self) -> int:
        return self._freq

    def __call__(self, engine: Any) -> None:
        # Runs every iteration: keep it to a few dict operations unless a show is due.
        buffers = engine.log_buffer
        if engine.rank == 0:
            monitor = engine.monitor
            monitor.update(buffers['scalar'])
            done = iterations_done(engine)
            if self._position == 'after_iter':
                show = done % self._freq == 0
            else:
                show = monitor.iters > 0
            if show:
                self._show(engine, done)
        for buf in buffers.values():
            if buf:
                buf.clear()

    def _show(self, engine: Any, done: int) -> None:
        call_start = time.perf_counter()
        monitor = engine.monitor
        names = list(engine.policy.monitor_vars())
        # Then whatever else was reported: data_time in start(), values custom hooks put in the buffer.
        names += [k for k in monitor.sums if k not in names]
        averages = monitor.averages(names)
        elapsed = max(time.perf_counter() - monitor.since, 1e-9)
        instance = engine.instance_name
        title = (
            f'=== {instance} iteration {done}: averages over {monitor.iters} iterations '
            f'({monitor.iters / elapsed:.1f} it/s) ==='
        )
        hook_rows = _hook_rows(engine, elapsed)
        text = pretty_table(averages, title)
        if hook_rows:
            text += '\n' + _hook_table(hook_rows)
        engine.info(text)

        tb = engine.tb_logger
        if tb is not None:
            step = engine.collector_envstep
            for k, v in averages.items():
                tb.add_scalar(f'{instance}_iter/{k}', v, done)
                tb.add_scalar(f'{instance}_step/{k}', v, step)
            for row in hook_rows:
                tb.add_scalar(f'{instance}_hook_time/{row[0]}', row[3], done)
            for k, v in engine.log_buffer['scalars'].items():
                if isinstance(v, dict):
                    tb.add_scalars(f'{instance}_iter/{k}', v, done)
            histograms = engine.log_buffer['histogram']
            if histograms:
                import numpy as np

                for k, v in histograms.items():
                    tb.add_histogram(f'{instance}/{k}', np.asarray(v, dtype=np.float64), done)
        # The next window starts with this call, so the time of this show (tensorboard writes, the
        # writer's creation) is counted in the next table rather than lost.
        monitor.clear(since=call_start)
        hook_time = getattr(engine, 'hook_time', None)
        if hook_time is not None:
            hook_time.clear()


class LogReduceHook(LearnerHook):
    """Average the numeric log-buffer values over all ranks (one all-reduce per iteration).

    Runs only when ``torch.distributed`` is initialised (with world size 1 the reduce changes
    nothing); otherwise it does nothing. Histogram values are left per-rank. Every rank must
    report the same keys.
    """

    def __call__(self, engine: Any) -> None:
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        buffers = engine.log_buffer
        slots = []  # (buffer, key, sub-key or None), in an order every rank agrees on
        for kind in ('scalar', 'scalars'):
            buf = buffers[kind]
            for k in sorted(buf):
                v = buf[k]
                if isinstance(v, dict):
                    slots.extend((buf, k, sk) for sk in sorted(v) if _is_number(v[sk]))
                elif _is_number(v):
                    slots.append((buf, k, None))
        if not slots:
            return
        values = [float(b[k] if sk is None else b[k][sk]) for b, k, sk in slots]
        device = 'cuda' if dist.get_backend() == 'nccl' else 'cpu'
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        tensor /= dist.get_world_size()
        for (b, k, sk), v in zip(slots, tensor.tolist()):
            if sk is None:
                b[k] = v
            else:
                b[k][sk] = v


def _is_number(v: Any) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Real) or value != int(value) or value < 1:
        raise ValueError(f'{what} must be a positive integer, got {value!r}')
    return int(value)


def _hook_rows(engine: Any, elapsed: float) -> list[tuple]:
    """(name, position, calls, avg ms, total ms, share of wall time %) per hook since the last show."""
    hook_time = getattr(engine, 'hook_time', None) or {}
    rows = []
    for name, (total, calls, position) in hook_time.items():
        if calls:
            rows.append((name, position, calls, total * 1e3 / calls, total * 1e3, 100.0 * total / elapsed))
    return rows


def _hook_table(rows: list[tuple]) -> str:
    head = ('hook', 'position', 'calls', 'avg ms', 'total ms', 'share %')
    cells = [head] + [(r[0], r[1], str(r[2]), f'{r[3]:.4f}', f'{r[4]:.3f}', f'{r[5]:.2f}') for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = [' | '.join(c[i].ljust(widths[i]) for i in range(len(head))) for c in cells]
    rule = '-' * len(lines[0])
    return '\n'.join(['hook time since last show', rule, lines[0], rule] + lines[1:] + [rule])


# ---- registry and config --------------------------------------------------------------------------
for _name, _cls in (
    ('load_ckpt', LoadCkptHook),
    ('save_ckpt', SaveCkptHook),
    ('log_show', LogShowHook),
    ('log_reduce', LogReduceHook),
):
    LEARNER_HOOK_REGISTRY.register(_name, _cls)


def register_learner_hook(name: str, hook_type: type) -> None:
    """Make ``hook_type`` (a ``LearnerHook`` subclass) buildable as ``type=name`` in a hook config."""
    if not (isinstance(hook_type, type) and issubclass(hook_type, LearnerHook)):
        raise TypeError(f"register_learner_hook('{name}'): {hook_type!r} is not a LearnerHook subclass")
    LEARNER_HOOK_REGISTRY.register(name, hook_type)


def _freq_or_off(key: str, value: Any) -> int | None:
    if value is None or value is False or value == 0:
        return None
    return _positive_int(value, f"learner hook config '{key}'")


def _flag(key: str, value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"learner hook config '{key}' must be True or False, got {value!r}")
    return value


def _build_log_show(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    freq = _freq_or_off(key, value)
    if freq is None:
        return None
    return LEARNER_HOOK_REGISTRY.get_cls('log_show')(
        'log_show', 20, position='after_iter', ext_args=EasyDict(freq=freq)
    )


def _build_load_ckpt(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    if value is None or value == '':
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"learner hook config '{key}' must be a checkpoint path ('' for none), got {value!r}")
    return LEARNER_HOOK_REGISTRY.get_cls('load_ckpt')(
        'load_ckpt', 20, position='before_run', ext_args=EasyDict(load_path=os.fspath(value))
    )


def _build_save_iter(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    freq = _freq_or_off(key, value)
    if freq is None:
        return None
    return LEARNER_HOOK_REGISTRY.get_cls('save_ckpt')(
        'save_ckpt_after_iter', 20, position='after_iter', ext_args=EasyDict(freq=freq, keep_n=keep_n)
    )


def _build_save_run(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    if not _flag(key, value):
        return None
    return LEARNER_HOOK_REGISTRY.get_cls('save_ckpt')('save_ckpt_after_run', 20, position='after_run')


def _build_log_reduce(key: str, value: Any, keep_n: int | None) -> LearnerHook | None:
    if not _flag(key, value):
        return None
    return LEARNER_HOOK_REGISTRY.get_cls('log_reduce')('log_reduce_after_iter', 10, position='after_iter')


_SHORT_FORMS: dict[str, Callable[[str, Any, int | None], LearnerHook | None]] = {
    'load_ckpt_before_run': _build_load_ckpt,
    'log_show_after_iter': _build_log_show,
    'save_ckpt_after_iter': _build_save_iter,
    'save_ckpt_after_run': _build_save_run,
    'log_reduce_after_iter': _build_log_reduce,
}
_FULL_FORM_KEYS = {'name', 'type', 'position', 'priority', 'ext_args'}


def _build_full_form(key: str, value: dict[str, Any]) -> LearnerHook:
    unknown = sorted(set(value) - _FULL_FORM_KEYS)
    if unknown:
        raise ValueError(f"learner hook config '{key}': unknown field(s) {unknown}; allowed: {sorted(_FULL_FORM_KEYS)}")
    missing = [f for f in ('type', 'position') if value.get(f) is None]
    if missing:
        raise ValueError(f"learner hook config '{key}': missing field(s) {missing}")
    try:
        cls = LEARNER_HOOK_REGISTRY.get_cls(value['type'])
    except KeyError as exc:
        raise ValueError(f"learner hook config '{key}': {exc.args[0]}") from None
    ext_args = value.get('ext_args') or EasyDict()
    if not isinstance(ext_args, dict):
        raise ValueError(f"learner hook config '{key}': ext_args must be a dict, got {ext_args!r}")
    # DI-engine hooks read ext_args by attribute (ext_args.freq), as configs are EasyDicts there.
    ext_args = ext_args if isinstance(ext_args, EasyDict) else EasyDict(ext_args)
    return cls(
        value.get('name', key), value.get('priority', DEFAULT_PRIORITY), position=value['position'], ext_args=ext_args
    )


def build_learner_hook_by_cfg(hook_cfg: dict[str, Any]) -> dict[str, list[LearnerHook]]:
    """Build ``{position: [hooks sorted by priority]}`` from a learner's ``hook`` config.

    Short form: ``load_ckpt_before_run=path`` ('' = none), ``log_show_after_iter=N``,
    ``save_ckpt_after_iter=N``, ``save_ckpt_after_run=True``, ``log_reduce_after_iter=True``
    (0 / None / False switch a hook off), plus ``keep_n`` for ``save_ckpt_after_iter``.
    Full form: any key whose value is a dict ``{type, position, name?, priority?, ext_args?}``,
    ``type`` being a name registered with ``register_learner_hook``.
    """
    hooks: dict[str, list[LearnerHook]] = {p: [] for p in POSITIONS}
    keep_n = hook_cfg.get('keep_n', None)
    if keep_n is not None and (isinstance(keep_n, bool) or not isinstance(keep_n, int) or keep_n < 0):
        raise ValueError(f"learner hook config 'keep_n' must be an int >= 0 or None, got {keep_n!r}")
    for key, value in hook_cfg.items():
        if key == 'keep_n':
            continue
        if isinstance(value, dict):
            hook = _build_full_form(key, value)
        elif key in _SHORT_FORMS:
            hook = _SHORT_FORMS[key](key, value, keep_n)
        else:
            raise ValueError(
                f"learner hook config: unknown key '{key}'; short-form keys are "
                f"{sorted(_SHORT_FORMS) + ['keep_n']}, a full-form hook's value must be a dict"
            )
        if hook is not None:
            add_learner_hook(hooks, hook)
    return hooks


def add_learner_hook(hooks: dict[str, list[LearnerHook]], hook: LearnerHook) -> None:
    """Insert ``hook`` after every hook of its position whose priority is <= its own."""
    if not isinstance(hook, LearnerHook):
        raise TypeError(f'add_learner_hook: {hook!r} is not a LearnerHook')
    if hook.position not in hooks:
        raise ValueError(
            f"add_learner_hook: hook '{hook.name}' has position {hook.position!r}, not one of {list(hooks)}"
        )
    bucket = hooks[hook.position]
    idx = len(bucket)
    while idx > 0 and bucket[idx - 1].priority > hook.priority:
        idx -= 1
    bucket.insert(idx, hook)


def merge_hooks(
    hooks1: dict[str, list[LearnerHook]], hooks2: dict[str, list[LearnerHook]]
) -> dict[str, list[LearnerHook]]:
    """Merge two ``{position: [hooks]}`` dicts; at equal priority ``hooks1``'s come first."""
    if set(hooks1) != set(hooks2):
        raise ValueError(f'merge_hooks: positions differ: {sorted(hooks1)} vs {sorted(hooks2)}')
    # sorted() is stable, which keeps registration order among equal priorities.
    return {k: sorted(list(hooks1[k]) + list(hooks2[k]), key=lambda h: h.priority) for k in hooks1}


def show_hooks(hooks: dict[str, list[LearnerHook]]) -> str:
    """Print (and return) one line per position listing its hooks in call order."""
    lines = [
        f'{pos}: {[f"{h.name}({type(h).__name__}, priority={h.priority})" for h in hs]}' for pos, hs in hooks.items()
    ]
    text = '\n'.join(lines)
    print(text)
    return text
