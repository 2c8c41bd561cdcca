"""The checkpoint hooks (``load_ckpt``, ``save_ckpt``) and ``write_checkpoint``, which the learner's
``save_checkpoint`` also uses."""

from __future__ import annotations

import math
import os
from typing import Any

from ding.utils.atomic_file import StorageError
from ding.utils.checkpoint import (
    BEST_PREFIX,
    get_rng_state,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
    set_rng_state,
)
from ding.worker.resume import EXTRA_KEY, experiment_ckpt_dir

from .hook_base import LearnerHook, iterations_done, positive_int, register_learner_hook

# Suffixes DI-engine users put on checkpoint names; the checkpoint module adds its own.
_CKPT_SUFFIXES = ('.pth.tar', '.pth', '.safetensors')


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
    written path. A checkpoint that cannot be written (disk full, read-only or missing directory) raises
    ``StorageError`` naming the path and the iteration not saved.
    """
    if engine.rank != 0:
        return None
    if engine.policy is None:
        raise RuntimeError(f'{engine.instance_name}: cannot save a checkpoint without a policy')
    if iteration is None:
        iteration = iterations_done(engine)
    dirname = checkpoint_dir(engine)
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
    target = os.path.join(dirname, name)
    try:
        os.makedirs(dirname, exist_ok=True)
        path = save_checkpoint(target, state, config_hash=getattr(engine, 'config_hash', '') or '')
    except OSError as exc:
        raise StorageError(
            f'{engine.instance_name}: cannot write checkpoint {target}.safetensors '
            f'({exc.strerror or exc}); the learner state of iteration {iteration} was NOT saved',
            exc,
        ) from exc
    best_return = (state.get('extra_state') or {}).get(EXTRA_KEY, {}).get('evaluator_best_return')
    record = {
        'name': name,
        'iteration': int(iteration),
        'envstep': int(engine.collector_envstep),
        'kind': 'best' if name.startswith(BEST_PREFIX) else 'periodic',
        'eval_return': best_return if name.startswith(BEST_PREFIX) and math.isfinite(best_return or math.nan) else None,
        'replay_cursor': engine.replay_cursor,
    }
    engine.checkpoint_written(int(iteration), path, record)
    engine.info(f'{engine.instance_name} saved checkpoint {path} (iteration {iteration})')
    return path


class LoadCkptHook(LearnerHook):
    """Load ``ext_args.load_path`` into the learner (policy state, iteration, env steps, RNG).

    An empty path does nothing. Reads this project's safetensors checkpoints and DI-engine's
    ``*.pth.tar`` files (tensors only) through ``ding.utils.checkpoint.load_checkpoint``.
    """

    def __init__(
        self,
        name: str,
        priority: float,
        position: str | None = None,
        ext_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, position=position, ext_args=ext_args, **kwargs)
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

    def __init__(
        self,
        name: str,
        priority: float,
        position: str | None = None,
        ext_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, priority, position=position, ext_args=ext_args, **kwargs)
        self._freq = positive_int(self._ext_args.get('freq', 1), f"learner hook '{self.name}': ext_args.freq")
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
            last = getattr(engine, 'last_checkpoint', None)
            if last is not None and last[0] == done and not engine.ckpt_name:
                engine.info(f'{engine.instance_name}: checkpoint of iteration {done} already written: {last[1]}')
                return
        write_checkpoint(engine, done)
        if self._keep_n and self._position == 'after_iter':
            prune_checkpoints(checkpoint_dir(engine), self._keep_n, prefix='iteration_')


register_learner_hook('load_ckpt', LoadCkptHook)
register_learner_hook('save_ckpt', SaveCkptHook)
