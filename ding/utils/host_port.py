"""``HOST:PORT`` addresses of the services a run talks to (replay server, weights endpoint), checked once."""

from __future__ import annotations

from typing import Any


def parse_host_port(address: Any, where: str = 'address') -> tuple[str, int]:
    """``(host, port)`` of ``'HOST:PORT'``; ``ValueError`` naming ``where`` otherwise."""
    if not isinstance(address, str) or address.count(':') != 1:
        raise ValueError(f'{where} must be HOST:PORT, got {address!r}')
    host, port = address.split(':')
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'{where} must be HOST:PORT with a port in [1, 65535], got {address!r}')
    return host, int(port)


__all__ = ['parse_host_port']
