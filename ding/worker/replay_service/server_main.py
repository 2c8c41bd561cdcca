"""``ding replay-server``: one of ding's replay buffers served over gRPC (docs/replay.md).

    DING_RUN_SECRET=... ding replay-server --port 50051 --config cfg.py     # the config's replay_buffer section
    DING_RUN_SECRET=... ding replay-server --port 50051 --buffer-type advanced --size 100000

Binds 127.0.0.1 unless ``--host`` says otherwise; prints ``replay server listening on HOST:PORT`` once it
listens; stops on SIGTERM / SIGINT. The buffer lives in memory: a restarted server starts empty and the
collectors refill it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from easydict import EasyDict

from ding.config import ConfigError, read_config
from ding.interaction.replay.client import DEFAULT_MAX_MESSAGE_BYTES
from ding.utils.registry import BUFFER_REGISTRY
from ding.worker.replay_buffer import create_buffer

from .remote_buffer import replay_secret
from .server import ReplayServer
from .settings import REPLAY_CLIENT_DEFAULTS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='ding replay-server', description='Serve a replay buffer over gRPC (replay.v1).')
    p.add_argument('--host', default='127.0.0.1', help='bind address (default 127.0.0.1: this host only)')
    p.add_argument('--port', type=int, default=0, help='port (default 0: a free one, printed at start)')
    p.add_argument('-c', '--config', help='a config file: its policy.other.replay_buffer section builds the buffer')
    p.add_argument('--buffer-type', help="the buffer's type (naive, advanced, ...); overrides the config's")
    p.add_argument('--size', type=int, help='replay_buffer_size; overrides the config')
    p.add_argument(
        '--max-message-mb', type=int, default=DEFAULT_MAX_MESSAGE_BYTES >> 20, help='largest message accepted (MiB)'
    )
    return p


def buffer_config(args: argparse.Namespace) -> EasyDict:
    """The buffer section from ``--config`` and the flags (the replay client's own keys left out)."""
    section: dict[str, Any] = {}
    if args.config:
        cfg, _, _ = read_config(args.config)
        section = dict(cfg.get('policy', {}).get('other', {}).get('replay_buffer', {}) or {})
    section = {k: v for k, v in section.items() if k not in REPLAY_CLIENT_DEFAULTS and k != 'save_with_checkpoint'}
    if args.buffer_type:
        section['type'] = args.buffer_type
    section.setdefault('type', 'naive')
    if args.size is not None:
        section['replay_buffer_size'] = args.size
    if section['type'] not in BUFFER_REGISTRY.query():
        raise ConfigError(f'replay buffer type {section["type"]!r} is not one of {BUFFER_REGISTRY.query()}')
    size = section.get('replay_buffer_size', 1)
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size < 1 or int(size) != size:
        raise ConfigError(f'replay_buffer_size must be an integer >= 1, got {size!r}')
    if 'replay_buffer_size' in section:
        section['replay_buffer_size'] = int(size)
    return EasyDict(section)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 <= args.port <= 65535 or args.max_message_mb < 1:
        print('ding replay-server: error: --port must be in [0, 65535] and --max-message-mb >= 1', file=sys.stderr)
        return 2
    try:
        secret = replay_secret()
        cfg = buffer_config(args)
    except ConfigError as exc:
        print(f'ding replay-server: error: {exc}', file=sys.stderr)
        return 2
    buffer = create_buffer(cfg, exp_name='replay_server')
    server = ReplayServer(
        buffer, secret, args.host, args.port, buffer_type=cfg.type, max_message_bytes=args.max_message_mb << 20
    )
    try:
        server.start()
    except OSError as exc:
        print(f'ding replay-server: error: {exc}', file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f'replay server listening on {server.address} ({cfg.type} buffer of {buffer.replay_buffer_size})', flush=True)
    stop.wait()
    server.stop()
    buffer.close()
    return 0


__all__ = ['main', 'build_parser']
