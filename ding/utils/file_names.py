"""Names of the files parallel workers share: sample data ids and checkpoint manifests.

Standard library only, so that the coordinator (which deletes sample files no replay buffer refers to)
needs neither numpy nor torch. ``ding.utils.file_transport`` and ``ding.utils.checkpoint`` read and write
these files.
"""

from __future__ import annotations

import os

SUFFIX = '.safetensors'
MANIFEST_SUFFIX = '.manifest.json'


def split_data_id(data_id: str) -> tuple[str, int]:
    """``'<file name>#<index>'`` -> ``(file name, index)``; ValueError for anything else, including names
    that would leave the data directory (data ids arrive over the network)."""
    name, sep, index = data_id.rpartition('#')
    if not sep or not name or not index.isdigit() or os.sep in name or name.startswith('.'):
        raise ValueError(f"malformed data_id '{data_id}' (expected '<file name>#<index>')")
    return name, int(index)


def manifest_path(path: str | os.PathLike) -> str:
    """``'<dir>/iteration_100[.safetensors]'`` -> ``'<dir>/iteration_100.manifest.json'``."""
    path = os.fspath(path)
    if path.endswith(MANIFEST_SUFFIX):
        return path
    if path.endswith(SUFFIX):
        path = path[: -len(SUFFIX)]
    return path + MANIFEST_SUFFIX


__all__ = ['SUFFIX', 'MANIFEST_SUFFIX', 'split_data_id', 'manifest_path']
