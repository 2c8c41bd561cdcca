"""Keeping names and paths that arrive from elsewhere (a task over HTTP, a shared directory) inside the
directories a process was started with.

``check_plain_name`` accepts one path component that cannot climb out of the directory it is joined to;
``check_inside`` accepts a path whose resolved form (symbolic links followed, ``..`` folded) is one of the
given roots or lies below one. Both raise ``UnsafePathError`` naming what was refused and why.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

# Longest name accepted: file systems allow 255 bytes per component, and derived names add suffixes.
MAX_NAME_LENGTH = 128


class UnsafePathError(ValueError):
    """A name or path from an untrusted source would lead outside the allowed directories."""


def check_plain_name(value: Any, what: str, max_length: int = MAX_NAME_LENGTH) -> str:
    """``value`` when it is a plain file name: a non-empty string of at most ``max_length`` characters with no
    path separator, no NUL or other control character, and no leading dot (which also refuses '.' and '..')."""
    if not isinstance(value, str) or not value:
        raise UnsafePathError(f'{what} must be a non-empty string, got {value!r}')
    if len(value) > max_length:
        raise UnsafePathError(f'{what} is longer than {max_length} characters ({len(value)})')
    if '/' in value or '\\' in value:
        raise UnsafePathError(f'{what} must be a plain name without path separators, got {value!r}')
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise UnsafePathError(f'{what} must not hold control characters (NUL included), got {value!r}')
    if value.startswith('.'):
        raise UnsafePathError(f"{what} must not start with '.', got {value!r}")
    return value


def resolved(path: str) -> str:
    """The absolute path with symbolic links followed and ``..`` folded (the path need not exist)."""
    return os.path.realpath(os.path.abspath(path))


def is_inside(path: str, root: str) -> bool:
    """Whether ``path`` resolves to ``root`` or below it (both resolved)."""
    real_path, real_root = resolved(path), resolved(root)
    return os.path.commonpath([real_path, real_root]) == real_root


def check_inside(value: Any, roots: Iterable[str], what: str) -> str:
    """``value`` (a path string) when it resolves inside one of ``roots``; the resolved path is returned, so
    that a later change of a symbolic link in between cannot redirect what the caller opens."""
    if not isinstance(value, str) or not value:
        raise UnsafePathError(f'{what} must be a non-empty path string, got {value!r}')
    if '\x00' in value:
        raise UnsafePathError(f'{what} must not hold a NUL character')
    allowed = [root for root in roots if root]
    real = resolved(value)
    if any(is_inside(real, root) for root in allowed):
        return real
    shown = ', '.join(resolved(root) for root in allowed) or 'none configured'
    where = repr(value) if real == value else f'{value!r} (resolved: {real})'
    raise UnsafePathError(f'{what} {where} is outside the allowed directories ({shown})')


__all__ = ['MAX_NAME_LENGTH', 'UnsafePathError', 'check_inside', 'check_plain_name', 'is_inside', 'resolved']
