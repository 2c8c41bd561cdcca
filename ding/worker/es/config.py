"""The ``policy.es_server`` section: the ES learner server's keys, defaults and bounds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ES_SERVER_DEFAULTS: dict[str, Any] = dict(
    # local worker processes `ding -m es` starts (0: only remote ones, `ding es-worker --connect ...`)
    worker_num=2,
    # where the server listens; 127.0.0.1 keeps it on this host (port 0: any free port, logged at start)
    host='127.0.0.1',
    port=0,
    # model bytes per download chunk (a worker acknowledges each chunk before it gets the next)
    chunk_bytes=256 * 1024,
    # a download in progress whose model lags the newest by this many versions (or more) is very old: the next
    # chunk signal restarts it with the newest model; a smaller lag is recent: it goes on, and the newer model is
    # a skipped model update for that worker
    very_old_lag=3,
    # seconds a connected worker has to ask for initialisation before it is disconnected
    init_timeout=10.0,
    # the largest frame accepted from a worker (a larger length prefix closes the connection)
    max_frame_bytes=1024 * 1024,
)

ES_SERVER_BOUNDS: dict[str, tuple[str, str]] = {
    'es_server.worker_num': ('int', '[0, 1024]'),
    'es_server.port': ('int', '[0, 65535]'),
    'es_server.chunk_bytes': ('int', '[4, 2097152]'),  # a worker accepts frames up to 4 MiB
    'es_server.very_old_lag': ('int', '[1, inf)'),
    'es_server.init_timeout': ('number', '(0, inf)'),
    'es_server.max_frame_bytes': ('int', '[1024, 67108864]'),
}


@dataclass(frozen=True)
class ESServerSettings:
    worker_num: int = ES_SERVER_DEFAULTS['worker_num']
    host: str = ES_SERVER_DEFAULTS['host']
    port: int = ES_SERVER_DEFAULTS['port']
    chunk_bytes: int = ES_SERVER_DEFAULTS['chunk_bytes']
    very_old_lag: int = ES_SERVER_DEFAULTS['very_old_lag']
    init_timeout: float = ES_SERVER_DEFAULTS['init_timeout']
    max_frame_bytes: int = ES_SERVER_DEFAULTS['max_frame_bytes']

    def __post_init__(self) -> None:
        if self.chunk_bytes % 4:
            raise ValueError(f'policy.es_server.chunk_bytes = {self.chunk_bytes}: must be a multiple of 4 (float32)')

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> ESServerSettings:
        """The settings of a (validated) ``policy.es_server`` section; missing keys take the defaults."""
        return cls(**{k: v for k, v in (section or {}).items() if k in ES_SERVER_DEFAULTS})


__all__ = ['ES_SERVER_BOUNDS', 'ES_SERVER_DEFAULTS', 'ESServerSettings']
