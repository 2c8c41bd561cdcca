"""Atomic file writes: a temp file beside the target (fsynced when durable), then ``os.replace``."""

from __future__ import annotations

import os

# The key a worker sets (True) in the result of a task it ended because a file could not be written (a
# ``StorageError``: disk full, read-only or unwritable directory): a retry would write to the same place, so the
# coordinator ends the run naming the path and what was not saved instead of handing the task to another worker.
STORAGE_REFUSAL = 'storage_error'


class StorageError(OSError):
    """A file that could not be written (disk full, read-only or missing directory...). The message names the
    path and what was not saved; ``errno`` is the cause's."""

    def __init__(self, message: str, cause: OSError | None = None) -> None:
        super().__init__(message)
        self.errno = cause.errno if cause is not None else None


def fsync_dir(directory: str) -> None:
    # Makes the renames durable; some filesystems cannot open/fsync a directory, which is not fatal.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_temp(path: str, data: bytes, durable: bool = True) -> str:
    """Write ``data`` to a fresh temp file beside ``path`` (and fsync it when ``durable``); return the temp path."""
    directory = os.path.dirname(path) or '.'
    tmp = os.path.join(directory, f'.{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp')
    # os.open with 0o666 lets the umask decide permissions, like a plain open() would.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


def write_atomic(path: str, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` in one step: a reader sees the old file or the new one, never a part."""
    tmp = write_temp(path, data, durable)
    try:
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    if durable:
        fsync_dir(os.path.dirname(path) or '.')


def append_line(path: str, line: str) -> None:
    """Append ``line`` (a newline is added) to ``path`` with one ``write`` on an ``O_APPEND`` descriptor: lines
    of several writers never interleave, and a reader sees each line whole or (while it is written) not yet."""
    data = (line.rstrip('\n') + '\n').encode('utf-8')
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f'{path}: short append ({written} of {len(data)} bytes)')
    finally:
        os.close(fd)


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


__all__ = [
    'STORAGE_REFUSAL',
    'StorageError',
    'append_line',
    'fsync_dir',
    'write_atomic',
    'write_temp',
    'remove_quietly',
]
