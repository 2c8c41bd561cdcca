"""A learner's ``checkpoint`` section at work: checkpoints every N env steps / M minutes, and every checkpoint
also stored under ``ckpt_uri`` (``ding.utils.checkpoint_uploader``) when one is set.

``attach_checkpoint_storage`` is called by ``BaseLearner`` once its hooks exist (rank 0 only); the run service
subscribes to ``learner.checkpoint_uploader`` from above to report ``checkpoint_stalled``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

import ding
from ding.utils.checkpoint import prune_checkpoints
from ding.utils.checkpoint_settings import CheckpointSettings
from ding.utils.checkpoint_uploader import CheckpointUploader
from ding.utils.jsonable import to_jsonable

from .checkpoint_hooks import checkpoint_dir, write_checkpoint
from .hook_base import LearnerHook, iterations_done


class CheckpointStorageHook(LearnerHook):
    """after_iter: write ``iteration_N`` when ``every_env_steps`` env steps or ``every_minutes`` minutes passed
    since the last one (keeping ``keep_n`` locally), and with ``on_stall='pause'`` hold training while the
    uploader is stalled."""

    def __init__(self, settings: CheckpointSettings, uploader: CheckpointUploader | None, **kwargs: Any) -> None:
        super().__init__('checkpoint_storage', 25, position='after_iter', **kwargs)
        self.settings = settings
        self.uploader = uploader
        self._last_envstep: int | None = None
        self._last_time = time.monotonic()

    def _due(self, envstep: int) -> bool:
        if self._last_envstep is None:  # the first iteration of this run (or of a resumed one) sets the baseline
            self._last_envstep = envstep
            return False
        steps, minutes = self.settings.every_env_steps, self.settings.every_minutes
        if steps is not None and envstep - self._last_envstep >= steps:
            return True
        return minutes is not None and time.monotonic() - self._last_time >= minutes * 60

    def __call__(self, engine: Any) -> None:
        if engine.rank != 0:
            return
        if self.settings.cadence and self._due(engine.collector_envstep):
            write_checkpoint(engine, iterations_done(engine))
            self._last_envstep = engine.collector_envstep
            self._last_time = time.monotonic()
            prune_checkpoints(checkpoint_dir(engine), self.settings.keep_n, prefix='iteration_')
        uploader = self.uploader
        if uploader is not None and uploader.stalled and self.settings.on_stall == 'pause':
            engine.info(
                f'training paused at iteration {iterations_done(engine)}: checkpoint uploads to '
                f'{self.settings.ckpt_uri} are stalled ({uploader.last_error}); waiting for them to work again',
                console=True,
            )
            uploader.wait_until_recovered(lambda: engine.stop_requested)
            engine.info('checkpoint uploads work again: training resumed', console=True)


def run_info(engine: Any) -> dict[str, Any]:
    """MANIFEST.json's run-level fields: who wrote it, with which versions and which config."""
    config = engine.run_config
    return {
        'exp_name': engine.exp_name,
        'instance': engine.instance_name,
        'config_hash': engine.config_hash,
        'ding_version': ding.__version__,
        'torch_version': torch.__version__,
        'config': to_jsonable(config, 'repr', finite=True) if config is not None else None,
    }


def attach_checkpoint_storage(engine: Any, section: Any) -> CheckpointUploader | None:
    """Set up ``engine``'s checkpoint section (see the module doc); returns the uploader (None without ckpt_uri)."""
    try:
        settings = CheckpointSettings.from_config(section).for_instance(engine.instance_name)
    except ValueError as exc:
        raise ValueError(f'learner config: {exc}') from None
    if engine.rank != 0 or (settings.ckpt_uri is None and not settings.cadence):
        return None
    uploader = None
    if settings.ckpt_uri is not None:
        uploader = CheckpointUploader(settings, checkpoint_dir(engine), run_info=lambda: run_info(engine))
        uploader.add_listener(lambda event, fields: _log_event(engine, event, fields))
        engine.checkpoint_listeners.append(uploader.submit)
        engine.track_replay_cursor = True
    engine.register_hook(CheckpointStorageHook(settings, uploader))
    return uploader


def _log_event(engine: Any, event: str, fields: dict[str, Any]) -> None:
    if event == 'checkpoint_uploaded':
        engine.info(f'checkpoint {fields["checkpoint"]} stored at {fields["uri"]} ({fields["seconds"]} s)')
    elif event == 'checkpoint_stalled':
        engine.info(
            f'checkpoint_stalled: {fields["checkpoint"]} not stored after {fields["attempts"]} attempts '
            f'({fields["error"]}); training goes on, uploads keep being retried',
            console=True,
        )
    elif event == 'checkpoint_recovered':
        engine.info(f'checkpoint uploads work again ({fields["checkpoint"]} stored)', console=True)
    elif event == 'checkpoint_upload_failed':
        engine.debug(f'checkpoint upload attempt {fields["attempt"]} failed: {fields["error"]}')


__all__ = ['CheckpointStorageHook', 'attach_checkpoint_storage', 'run_info']
