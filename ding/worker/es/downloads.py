"""The active model downloads of the ES server: which worker is being sent which model, and how far along.

Pure bookkeeping (no sockets): the server asks it what a download signal or a chunk signal means for one
worker and acts on the answer. A download's model is *very old* when the newest model is ``very_old_lag``
or more versions ahead of it, *recent* otherwise.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelImage:
    """One published model: its version and its float32 parameters as bytes (what a download sends)."""

    version: int
    data: bytes


@dataclass
class Download:
    """A transfer in progress: the model being sent and the bytes sent so far."""

    model: ModelImage
    offset: int = 0


class DownloadStart(enum.Enum):
    """What a download signal did."""

    STARTED = 'started'  # no download was in progress: a new one was added (queue its first chunk)
    SKIPPED_RECENT = 'skipped_recent'  # a recent one is in progress: the newer model is skipped for this worker
    PENDING_RESET = 'pending_reset'  # a very old one is in progress: the next chunk signal resets it


@dataclass(frozen=True)
class Chunk:
    """What a chunk signal sends: ``data`` of model ``version`` at ``offset``; ``last`` ends the download;
    ``reset``: the download was restarted with the newest model first."""

    version: int
    offset: int
    total: int
    data: bytes
    last: bool
    reset: bool


class DownloadTable:
    """Active downloads by worker id, served in chunks of ``chunk_bytes``."""

    def __init__(self, chunk_bytes: int, very_old_lag: int) -> None:
        if chunk_bytes < 1 or very_old_lag < 1:
            raise ValueError(f'DownloadTable: chunk_bytes {chunk_bytes} and very_old_lag {very_old_lag} must be >= 1')
        self.chunk_bytes = chunk_bytes
        self.very_old_lag = very_old_lag
        self._active: dict[int, Download] = {}

    def __len__(self) -> int:
        return len(self._active)

    def __contains__(self, worker_id: int) -> bool:
        return worker_id in self._active

    def get(self, worker_id: int) -> Download | None:
        return self._active.get(worker_id)

    def is_very_old(self, download: Download, latest: ModelImage) -> bool:
        return latest.version - download.model.version >= self.very_old_lag

    def signal_download(self, worker_id: int, latest: ModelImage) -> DownloadStart:
        """Signal "worker model download" for ``worker_id`` with ``latest`` the newest model."""
        download = self._active.get(worker_id)
        if download is None:
            self._active[worker_id] = Download(latest)
            return DownloadStart.STARTED
        if self.is_very_old(download, latest):
            return DownloadStart.PENDING_RESET
        return DownloadStart.SKIPPED_RECENT

    def signal_chunk(self, worker_id: int, latest: ModelImage) -> Chunk | None:
        """Signal "worker model download chunk": the chunk to send (None: no download of that worker is in
        progress). A very old download restarts with ``latest`` first; the last chunk removes the download."""
        download = self._active.get(worker_id)
        if download is None:
            return None
        reset = self.is_very_old(download, latest)
        if reset:
            download = self._active[worker_id] = Download(latest)
        data = download.model.data
        start = download.offset
        end = min(start + self.chunk_bytes, len(data))
        download.offset = end
        last = end >= len(data)
        if last:
            del self._active[worker_id]
        return Chunk(download.model.version, start, len(data), data[start:end], last, reset)

    def remove(self, worker_id: int) -> bool:
        """Drop ``worker_id``'s download (it disconnected); whether there was one."""
        return self._active.pop(worker_id, None) is not None


__all__ = ['Chunk', 'Download', 'DownloadStart', 'DownloadTable', 'ModelImage']
