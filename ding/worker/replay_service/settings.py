"""The replay client's settings (``policy.other.replay_buffer``), checked before any work starts; free of grpc,
torch and the interaction layer, so the serial pipeline reads them without loading any of those."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from easydict import EasyDict

from ding.config.errors import ConfigError
from ding.utils.host_port import parse_host_port

# The keys of policy.other.replay_buffer that select and tune the replay service's client.
REPLAY_CLIENT_DEFAULTS = dict(
    replay_address=None,  # 'HOST:PORT' of a `ding replay-server`; None: the in-process buffer
    prefetch_depth=4,  # batches kept decoded ahead of the training loop
    replay_timeout=10.0,  # seconds one call may take
    degraded_after=3,  # consecutive failed calls before the learner pauses
    sample_wait=0.1,  # seconds `sample` waits for a batch before returning None
)
_SECTION = 'policy.other.replay_buffer'
# The data_id of a sample a parallel collector inserted into the replay service: the coordinator counts such
# samples (env steps, pacing) without a file or a metadata buffer behind them (docs/replay.md).
REPLAY_DATA_ID = 'replay-service'


def check_replay_client_config(section: Mapping[str, Any] | None) -> EasyDict | None:
    """The replay client's settings of ``policy.other.replay_buffer`` (None when ``replay_address`` is unset);
    ``ConfigError`` naming the key when a value is out of bounds."""
    if not section or section.get('replay_address') is None:
        return None
    cfg = EasyDict({k: section.get(k, v) for k, v in REPLAY_CLIENT_DEFAULTS.items()})
    problems = []
    try:
        parse_host_port(cfg.replay_address, f'{_SECTION}.replay_address')
    except ValueError as exc:
        problems.append(str(exc))

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    def integer(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not integer(cfg.prefetch_depth) or not 1 <= cfg.prefetch_depth <= 64:
        problems.append(
            f'{_SECTION}.prefetch_depth = {cfg.prefetch_depth!r} is out of range: must be an int in [1, 64]'
        )
    if not integer(cfg.degraded_after) or cfg.degraded_after < 1:
        problems.append(f'{_SECTION}.degraded_after = {cfg.degraded_after!r} is out of range: must be an int >= 1')
    if not number(cfg.replay_timeout) or cfg.replay_timeout <= 0:
        problems.append(f'{_SECTION}.replay_timeout = {cfg.replay_timeout!r} is out of range: must be a number > 0')
    if not number(cfg.sample_wait) or cfg.sample_wait < 0:
        problems.append(f'{_SECTION}.sample_wait = {cfg.sample_wait!r} is out of range: must be a number >= 0')
    if section.get('save_with_checkpoint'):
        problems.append(
            f'{_SECTION}.save_with_checkpoint cannot be True with replay_address: the replay server keeps the data'
        )
    if problems:
        raise ConfigError('invalid replay client config:\n  ' + '\n  '.join(problems))
    return cfg


def replay_client_of(policy_cfg: Mapping[str, Any] | None) -> EasyDict | None:
    """The replay client's settings of a policy config (a worker's task ``policy``), None without
    ``replay_address``."""
    other = (policy_cfg or {}).get('other') or {}
    return check_replay_client_config(other.get('replay_buffer'))


def check_parallel_replay(main_cfg: Mapping[str, Any]) -> EasyDict | None:
    """The replay client's settings of a parallel run's main config (None without ``replay_address``), checked
    with what the parallel pipeline can do with them: ``ConfigError`` naming every key that cannot apply."""
    policy = main_cfg.get('policy') or {}
    cfg = replay_client_of(policy)
    if cfg is None:
        return None
    learner = (policy.get('learn') or {}).get('learner') or {}
    multi = learner.get('multi_learner') or {}
    problems = []
    if multi.get('assignment') == 'bins':
        problems.append(
            "policy.learn.learner.multi_learner.assignment='bins' gives every learner the data of its own "
            "collectors: one replay server holds one buffer for all of them (use 'random')"
        )
    staleness = learner.get('max_staleness')
    if staleness is not None and staleness != math.inf:
        problems.append(
            'policy.learn.learner.max_staleness is applied to the sample files the coordinator names: with '
            f'{_SECTION}.replay_address the replay server samples, bound the staleness there '
            f'({_SECTION}.max_staleness)'
        )
    if problems:
        raise ConfigError(
            f'parallel config: {_SECTION}.replay_address = {cfg.replay_address!r} cannot be used with:\n  '
            + '\n  '.join(problems)
        )
    return cfg


__all__ = [
    'REPLAY_CLIENT_DEFAULTS',
    'REPLAY_DATA_ID',
    'check_parallel_replay',
    'check_replay_client_config',
    'replay_client_of',
]
