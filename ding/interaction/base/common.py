"""Small network helpers: tokens, local address discovery, address formatting and parsing."""

import secrets
import socket
from typing import Any
from urllib.parse import urlsplit

from ..config import LOCAL_HOST


def random_token(nbytes: int = 32) -> str:
    """A fresh random hex token (``2 * nbytes`` characters) used to authenticate one side of a link."""
    return secrets.token_hex(nbytes)


def get_host_ip(default: str = LOCAL_HOST) -> str:
    """
    The IP address of the interface that holds the default outbound route, or ``default`` (127.0.0.1)
    when the machine has no such route. ``connect`` on a UDP socket only selects a route: no packet is sent.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(('8.8.8.8', 80))
            ip = sock.getsockname()[0]
    except OSError:
        return default
    return ip if ip and ip != '0.0.0.0' else default


def format_http_address(host: str, port: int, https: bool = False) -> str:
    """``http://host:port`` (IPv6 hosts get brackets)."""
    if ':' in host and not host.startswith('['):
        host = f'[{host}]'
    return '{}://{}:{}'.format('https' if https else 'http', host, port)


def split_http_address(address: str) -> tuple[str, int, bool]:
    """
    Parse ``http(s)://host:port`` into ``(host, port, https)``.
    Raises ``ValueError`` naming the address when it is not of that form.
    """
    if not isinstance(address, str):
        raise ValueError(f'http address must be a string, got {type(address).__name__}')
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError as err:
        raise ValueError(f'invalid http address {address!r}: {err}') from None
    if parts.scheme not in ('http', 'https') or not parts.hostname or port is None:
        raise ValueError(f'invalid http address {address!r}: expected http://host:port')
    return parts.hostname, port, parts.scheme == 'https'


def connectable_host(host: str) -> str:
    """The address to reach a server bound to ``host`` from this machine (wildcards map to loopback)."""
    if host in ('', '0.0.0.0'):
        return LOCAL_HOST
    if host == '::':
        return '::1'
    return host


def check_positive(name: str, value: Any) -> float:
    """``value`` as a float; ``ValueError`` naming ``name`` unless it is a positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f'{name} must be a positive number of seconds, got {value!r}')
    return float(value)


def check_retries(retries: Any, waiting: Any) -> None:
    """Validate ``request_retries`` (int >= 0) and ``request_retry_waiting`` (number >= 0)."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f'request_retries must be an int >= 0, got {retries!r}')
    if isinstance(waiting, bool) or not isinstance(waiting, (int, float)) or waiting < 0:
        raise ValueError(f'request_retry_waiting must be a number >= 0, got {waiting!r}')


def check_channel(channel: Any) -> int:
    """Validate a channel id (an int)."""
    if isinstance(channel, bool) or not isinstance(channel, int):
        raise ValueError(f'channel must be an int, got {channel!r}')
    return channel
