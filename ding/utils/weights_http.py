"""The HTTP side of ``/weights/*`` shared by the server and its clients, torch-free (``ding ctl`` imports it).

Addresses are ``'host:port'`` or ``'http://host:port'``; ``/weights/current`` answers raw safetensors bytes
(``CONTENT_TYPE``) with the version and the payload's sha256 in headers and the sha256 as ETag.
"""

from __future__ import annotations

from urllib.parse import urlsplit

HEADER_VERSION = 'X-Weights-Version'
HEADER_SHA256 = 'X-Weights-SHA256'
CONTENT_TYPE = 'application/octet-stream'


def normalize_address(address: str) -> str:
    """``'host:port'`` or ``'http://host:port'`` -> ``'http://host:port'`` (no trailing slash)."""
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f'address must be HOST:PORT or http://HOST:PORT, got {address!r}')
    address = address.strip().rstrip('/')
    if '://' not in address:
        address = 'http://' + address
    parts = urlsplit(address)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ('http', 'https') or not parts.hostname or port is None:
        raise ValueError(f'address must be HOST:PORT or http://HOST:PORT, got {address!r}')
    return address


def etag_matches(if_none_match: str | None, sha256: str) -> bool:
    """Whether an ``If-None-Match`` header names ``sha256`` (quoted or not, weak or not, in a list, or ``*``)."""
    if not if_none_match:
        return False
    for tag in if_none_match.split(','):
        tag = tag.strip()
        if tag == '*':
            return True
        if tag.startswith('W/'):
            tag = tag[2:]
        if tag.strip('"') == sha256:
            return True
    return False


__all__ = ['HEADER_VERSION', 'HEADER_SHA256', 'CONTENT_TYPE', 'normalize_address', 'etag_matches']
