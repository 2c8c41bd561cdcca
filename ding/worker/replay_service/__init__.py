"""The replay service (``ding replay-server``) and the learner's and collectors' side of it (docs/replay.md).
``settings`` loads without the ``replay`` extra; the other names load grpc on first use."""

from ding.utils.lazy_import import lazy_exports

from .settings import (
    REPLAY_CLIENT_DEFAULTS,
    REPLAY_DATA_ID,
    check_parallel_replay,
    check_replay_client_config,
    replay_client_of,
)

_EXPORTS = {
    'RemoteReplayBuffer': '.remote_buffer',
    'replay_secret': '.remote_buffer',
    'ReplayServer': '.server',
    'ReplayServicer': '.server',
    'TokenInterceptor': '.server',
}

__all__ = [
    'REPLAY_CLIENT_DEFAULTS',
    'REPLAY_DATA_ID',
    'check_parallel_replay',
    'check_replay_client_config',
    'replay_client_of',
] + list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
