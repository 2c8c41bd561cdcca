"""Resuming a run after a crash: putting a checkpoint's state back into the pipeline (which checkpoint to use:
``ding.worker.resume_choice``, re-exported here).

``resume`` (top-level config key, or ``ding ... --resume``) is one of

- ``'never'`` (default): start fresh; an existing ``./{exp_name}`` is left alone and the run gets a
  new, suffixed directory as before;
- ``'auto'``: the newest checkpoint of ``./{exp_name}/ckpt/`` that verifies against its manifest, or a
  fresh start when there is none;
- a path: that checkpoint (a ``.safetensors`` file, with or without the suffix, a DI-engine
  ``.pth.tar``, or a directory to take the newest valid checkpoint of). A path that does not verify
  is an error naming the file, raised before any work starts.

Serial pipelines call ``resolve_resume`` before ``compile_config`` (a resumed run keeps its
directory: ``renew_dir=False``), ``register_checkpoint_extras`` once the workers exist (so every
checkpoint also holds the collector's env steps and, when configured, the replay buffer), and
``restore_serial_state`` to load the checkpoint. A parallel learner calls ``resume_learner``.
"""

from __future__ import annotations

from typing import Any

from .resume_choice import (
    RESUME_AUTO,
    RESUME_NEVER,
    ResumeError,
    check_checkpoint,
    checkpoint_section,
    experiment_ckpt_dir,
    newer_remote_checkpoint,
    newest_valid_checkpoint,
    resolve_resume,
    resume_setting,
)

# Key of the pipeline's part of a checkpoint's ``extra_state`` (see learner_hook.write_checkpoint).
EXTRA_KEY = 'serial_pipeline'
# Config key (policy.other.replay_buffer.<key>) that puts the replay buffer into every checkpoint.
SAVE_BUFFER_KEY = 'save_with_checkpoint'


# ---- what checkpoints carry besides the learner's state -------------------------------------------
def save_buffer_with_checkpoint(cfg: Any) -> bool:
    """``policy.other.replay_buffer.save_with_checkpoint`` of a compiled config (default False)."""
    try:
        value = cfg.policy.other.replay_buffer.get(SAVE_BUFFER_KEY, False)
    except AttributeError:
        return False
    if not isinstance(value, bool):
        raise ResumeError(f'policy.other.replay_buffer.{SAVE_BUFFER_KEY} must be True or False, got {value!r}')
    return value


def register_checkpoint_extras(
    learner: Any, collector: Any = None, evaluator: Any = None, buffer: Any = None, save_buffer: bool = False
) -> None:
    """Make every checkpoint the learner writes also hold the collector's env steps, the evaluator's
    best return and (``save_buffer``) the replay buffer, under ``extra_state['serial_pipeline']``."""

    def extra() -> dict[str, Any]:
        state: dict[str, Any] = {}
        if collector is not None:
            state['collector_envstep'] = int(collector.envstep)
        if evaluator is not None:
            best = getattr(evaluator, 'best_return', None)
            if isinstance(best, (int, float)):
                state['evaluator_best_return'] = float(best)
        if save_buffer and buffer is not None:
            state['replay_buffer'] = pack_buffer_state(buffer.state_dict())
        return state

    learner.checkpoint_extras[EXTRA_KEY] = extra


# ---- putting a checkpoint's state back ------------------------------------------------------------
def _load(path: str) -> dict[str, Any]:
    from ding.utils.checkpoint import (  # deferred: checkpoints import torch; the coordinator uses this module torch-free
        CheckpointError,
        load_checkpoint,
    )

    try:
        return dict(load_checkpoint(path, map_location='cpu'))
    except CheckpointError as exc:
        raise ResumeError(f'cannot resume from {path}: {exc}') from None


def restore_learner_state(learner: Any, state: dict[str, Any], restore_rng: bool = True) -> dict[str, Any]:
    """Load a checkpoint's state dict into ``learner`` (policy incl. optimizer, iteration, env steps,
    RNG streams); return the pipeline's extra state it held (``{}`` if none)."""
    from ding.utils.checkpoint import (
        set_rng_state,  # deferred: checkpoints import torch; the coordinator uses this module torch-free
    )

    state = dict(state)
    last_iter = state.pop('last_iter', None)
    last_step = state.pop('last_step', None)
    rng_state = state.pop('rng_state', None)
    state.pop('config_hash', None)
    extra = state.pop('extra_state', None) or {}
    learner.policy.load_state_dict(state)
    if last_iter is not None:
        learner.last_iter.update(int(last_iter))
    if last_step is not None:
        learner.collector_envstep = int(last_step)
    if restore_rng and rng_state is not None:
        set_rng_state(rng_state)
    return dict(extra.get(EXTRA_KEY) or {})


def resume_learner(learner: Any, resume: Any = RESUME_AUTO, not_before: float | None = None) -> str | None:
    """For a learner process (e.g. a restarted parallel learner): resolve ``resume`` against the learner's
    own checkpoint directory and load it. Returns the checkpoint used, or None (fresh start)."""
    path = resolve_resume(
        None,
        resume,
        ckpt_dir=experiment_ckpt_dir(learner.exp_name, learner.instance_name),
        not_before=not_before,
        logger=learner,
    )
    if path is None:
        return None
    restore_learner_state(learner, _load(path))
    learner.info(
        f'{learner.instance_name} resumed from {path} (iteration {learner.train_iter}, '
        f'env step {learner.collector_envstep})'
    )
    return path


def restore_serial_state(
    learner: Any,
    collector: Any,
    evaluator: Any = None,
    buffer: Any = None,
    path: str | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Load checkpoint ``path`` into a serial pipeline: learner (policy, optimizer, iteration, RNG unless
    ``restore_rng`` is False), collector env steps (so the epsilon schedule resumes), the evaluator's best return
    and, when the checkpoint holds one, the replay buffer. Returns a summary dict."""
    if path is None:
        raise ValueError('restore_serial_state: no checkpoint path given')
    from ding.utils.checkpoint import (
        set_rng_state,  # deferred: checkpoints import torch; the coordinator uses this module torch-free
    )

    state = _load(path)
    rng_state = state.get('rng_state')
    extra = restore_learner_state(learner, state, restore_rng=False)
    envstep = int(extra.get('collector_envstep', learner.collector_envstep))
    collector.envstep = envstep
    learner.collector_envstep = envstep
    if evaluator is not None and 'evaluator_best_return' in extra:
        evaluator.best_return = float(extra['evaluator_best_return'])
    buffer_count = None
    if buffer is not None:
        if 'replay_buffer' in extra:
            buffer.load_state_dict(unpack_buffer_state(extra['replay_buffer']))
            buffer_count = buffer.count()
        elif save_buffer_with_checkpoint_of(buffer):
            learner.info(f'resume: {path} holds no replay buffer; starting with an empty one')
    # The RNG streams last, so that nothing done while restoring shifts them.
    if restore_rng and rng_state is not None:
        set_rng_state(rng_state)
    return _finish_restore(learner, path, envstep, buffer_count)


def save_buffer_with_checkpoint_of(buffer: Any) -> bool:
    cfg = getattr(buffer, '_cfg', None)
    return bool(cfg.get(SAVE_BUFFER_KEY, False)) if isinstance(cfg, dict) else False


def _finish_restore(learner: Any, path: str, envstep: int, buffer_count: int | None) -> dict[str, Any]:
    msg = f'resumed from {path}: iteration {learner.train_iter}, env step {envstep}'
    if buffer_count is not None:
        msg += f', replay buffer {buffer_count} samples'
    learner.info(msg)
    return {'path': path, 'train_iter': learner.train_iter, 'envstep': envstep, 'buffer_count': buffer_count}


# ---- replay buffer state, stored compactly ---------------------------------------------------------
# A buffer's state holds one small dict of tensors per sample; stored as is, that is one safetensors
# entry per tensor (tens of thousands). Packed, each sample key becomes one stacked tensor (or one
# JSON list of plain values), which saves and loads in a fraction of the time.
_PACKED = '$packed_samples'


def pack_buffer_state(state: dict[str, Any]) -> dict[str, Any]:
    """``buffer.state_dict()`` with its ``data`` list of sample dicts stacked column-wise when possible."""
    data = state.get('data') if isinstance(state, dict) else None
    if not isinstance(data, list):
        return state
    columns = _pack_samples(data)
    if columns is None:
        return state
    out = dict(state)
    out['data'] = {_PACKED: columns}
    return out


def unpack_buffer_state(state: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`pack_buffer_state`."""
    data = state.get('data') if isinstance(state, dict) else None
    if not (isinstance(data, dict) and _PACKED in data):
        return state
    out = dict(state)
    out['data'] = _unpack_samples(data[_PACKED])
    return out


def _pack_samples(data: list[Any]) -> dict[str, Any] | None:
    import numpy as np
    import torch

    slots = [i for i, d in enumerate(data) if d is not None]
    items = [data[i] for i in slots]
    if any(not isinstance(d, dict) for d in items):
        return None
    keys = list(items[0]) if items else []
    if any(list(d) != keys for d in items):
        return None  # samples of different shapes of dict: leave them to the generic writer
    columns: dict[str, Any] = {}
    for k in keys:
        values = [d[k] for d in items]
        first = values[0]
        if isinstance(first, torch.Tensor):
            if not all(
                isinstance(v, torch.Tensor)
                and v.shape == first.shape
                and v.dtype == first.dtype
                and v.device == first.device
                for v in values
            ):
                return None
            columns[k] = {'kind': 'tensor', 'value': torch.stack(values)}
        elif isinstance(first, np.ndarray):
            if (
                not all(isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype for v in values)
                or first.dtype.hasobject
            ):
                return None
            columns[k] = {'kind': 'ndarray', 'value': np.stack(values)}
        elif all(_plain(v) for v in values):
            columns[k] = {'kind': 'list', 'value': values}
        else:
            return None
    return {'size': len(data), 'slots': slots, 'keys': keys, 'columns': columns}


def _plain(v: Any) -> bool:
    # Non-finite floats are fine: the checkpoint writer spells them out.
    return v is None or isinstance(v, (bool, int, float, str))


def _unpack_samples(packed: dict[str, Any]) -> list[Any]:
    size, slots, keys, columns = packed['size'], list(packed['slots']), list(packed['keys']), packed['columns']
    data: list[Any] = [None] * int(size)
    for n, slot in enumerate(slots):
        data[int(slot)] = {k: columns[k]['value'][n] for k in keys}
    return data


__all__ = [
    'RESUME_NEVER',
    'RESUME_AUTO',
    'ResumeError',
    'resume_setting',
    'resolve_resume',
    'check_checkpoint',
    'checkpoint_section',
    'newer_remote_checkpoint',
    'newest_valid_checkpoint',
    'experiment_ckpt_dir',
    'save_buffer_with_checkpoint',
    'register_checkpoint_extras',
    'restore_learner_state',
    'restore_serial_state',
    'resume_learner',
    'pack_buffer_state',
    'unpack_buffer_state',
]
