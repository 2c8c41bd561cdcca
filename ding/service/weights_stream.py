"""The server side of ``GET /weights/stream``: server-sent events announcing each published weights version.

``WeightsStreams`` bounds how many streams are open at once and ends them all when the server stops; the route
itself (authentication, the 429 answer) is ``ding.service.http``'s. Each stream sends a comment line at once,
the current version, then one ``weights`` event per publication (identity and signature, never tensors), and a
keep-alive comment every ``keepalive_seconds`` when idle (also how often it notices that the client is gone).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

from flask import Response

from .weights import WeightsStore


class WeightsStreams:
    """Open streams of one server; thread-safe."""

    def __init__(self, store: WeightsStore, max_subscribers: int, keepalive_seconds: float) -> None:
        self.store = store
        self.max_subscribers = int(max_subscribers)
        self.keepalive_seconds = float(keepalive_seconds)
        self._subscribers = 0
        self._lock = threading.Lock()
        self._ending = threading.Event()

    @property
    def subscribers(self) -> int:
        with self._lock:
            return self._subscribers

    def acquire(self) -> bool:
        """Take a place for one more stream; False when ``max_subscribers`` are open."""
        with self._lock:
            if self._subscribers >= self.max_subscribers:
                return False
            self._subscribers += 1
            return True

    def _release(self) -> None:
        with self._lock:
            self._subscribers -= 1

    def response(self) -> Response:
        """The streaming answer for a place taken with ``acquire``; the place is freed when it closes."""
        response = Response(
            self._events(),
            status=200,
            mimetype='text/event-stream',
            headers={'Cache-Control': 'no-cache', 'X-Accel-Buffering': 'no'},
        )
        response.call_on_close(self._release)  # also when the generator never started
        return response

    def end(self) -> None:
        """End every stream now (the server stops) instead of at its next keep-alive."""
        self._ending.set()
        self.store.wake()

    def _events(self) -> Iterator[bytes]:
        yield b': weights stream\n\n'  # lets the client see the stream is open before the first version
        seq = -1
        while not self._ending.is_set():
            seq, announcements = self.store.wait_announcements(seq, self.keepalive_seconds)
            if self._ending.is_set():
                break
            for announcement in announcements:
                data = json.dumps(announcement, separators=(',', ':'))
                yield f'event: weights\nid: {announcement["version"]}\ndata: {data}\n\n'.encode()
            if not announcements:
                yield b': keep-alive\n\n'


__all__ = ['WeightsStreams']
