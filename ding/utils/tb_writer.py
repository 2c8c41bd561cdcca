"""The tensorboard writer every ding component gets: scalars are encoded here, anything else goes to tensorboardX.

Training code logs scalars, a few per iteration. Importing tensorboardX (and protobuf under it) for that costs
~80 ms and ~5 MB of every run's start-up and memory, and its writer only puts queued events on disk when it is
closed. This writer encodes the two message types a scalar needs by hand (the layout below is the public
``tensorboard/compat/proto/event.proto`` / ``summary.proto`` wire format), writes them as TFRecords, and makes
``flush()`` put everything on disk. Other ``add_*`` calls (histograms, ``add_scalars``, images, ...) create a
tensorboardX ``SummaryWriter`` on the same directory on first use; TensorBoard reads every event file there.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from typing import Any


def _crc32c_table() -> tuple:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecord files use."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack('<I', (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 fields: negative numbers are sent as their 64-bit two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def encode_event(
    wall_time: float, step: int = 0, file_version: str | None = None, summary: bytes | None = None
) -> bytes:
    """An ``Event``: wall_time (1, double), step (2, int64), file_version (3, string), summary (5)."""
    out = b'\x09' + struct.pack('<d', wall_time)
    if step:
        out += b'\x10' + _varint(step)
    if file_version is not None:
        out += _length_delimited(3, file_version.encode())
    if summary is not None:
        out += _length_delimited(5, summary)
    return out


def encode_scalar_summary(tag: str, value: float) -> bytes:
    """A ``Summary`` holding one ``Summary.Value``: tag (1, string), simple_value (2, float)."""
    return _length_delimited(1, _length_delimited(1, tag.encode()) + b'\x15' + struct.pack('<f', value))


class SummaryWriter:
    """Writes ``{logdir}/events.out.tfevents.{time}.{host}.ding``; the tensorboardX ``SummaryWriter`` interface.

    ``flush_secs``: events are put on disk at least this often (and on ``flush`` / ``close``).
    """

    def __init__(self, logdir: str, flush_secs: float = 10.0, filename_suffix: str = '') -> None:
        os.makedirs(logdir, exist_ok=True)
        self.logdir = logdir
        # '.ding' keeps this file apart from the one a delegated tensorboardX writer opens in the same second.
        name = f'events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.ding{filename_suffix}'
        self.file_path = os.path.join(logdir, name)
        self._file = open(self.file_path, 'wb')
        self._lock = threading.Lock()
        self._flush_secs = flush_secs
        self._last_flush = time.monotonic()
        self._delegate: Any = None
        self._write(encode_event(time.time(), file_version='brain.Event:2'))

    def add_scalar(
        self, tag: str, scalar_value: Any, global_step: int | None = None, walltime: float | None = None, **_: Any
    ) -> None:
        value = float(scalar_value.item() if hasattr(scalar_value, 'item') else scalar_value)
        step = int(global_step) if global_step is not None else 0
        self._write(
            encode_event(time.time() if walltime is None else walltime, step, summary=encode_scalar_summary(tag, value))
        )

    def _write(self, record: bytes) -> None:
        header = struct.pack('<Q', len(record))
        with self._lock:
            if self._file is None:
                raise ValueError(f'SummaryWriter: {self.file_path} is closed')
            self._file.write(header + _masked_crc(header) + record + _masked_crc(record))
            now = time.monotonic()
            if now - self._last_flush >= self._flush_secs:
                self._file.flush()
                self._last_flush = now

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        if self._delegate is not None:
            self._delegate.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
        if self._delegate is not None:
            self._delegate.close()
            self._delegate = None

    def __getattr__(self, name: str) -> Any:
        # Only reached for what this class does not define: histograms, add_scalars, images, text, ...
        if name.startswith('_'):
            raise AttributeError(name)
        if self._delegate is None:
            from .log_helper import tensorboardx_writer_cls

            self._delegate = tensorboardx_writer_cls()(self.logdir)
        return getattr(self._delegate, name)

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
