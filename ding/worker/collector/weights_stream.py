"""The actor's end of ``GET /weights/stream`` (server-sent events): a background thread that holds the
stream open, reconnects with exponential backoff when it drops, and records each announced version.

Announcements only say that a version exists (version, sha256, run id, signature); the weights themselves
are fetched and verified by ``WeightsClient.fetch`` on the thread that owns the policy.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from typing import Any

import requests

_LOG = logging.getLogger('ding.service.weights')


def parse_sse_event(lines: list[str]) -> tuple[str, str] | None:
    """``(event name, data)`` of one server-sent event given its lines; None for a comment-only block."""
    name, data = 'message', []
    for line in lines:
        if not line or line.startswith(':'):
            continue
        field, _, value = line.partition(':')
        value = value[1:] if value.startswith(' ') else value
        if field == 'event':
            name = value
        elif field == 'data':
            data.append(value)
    return (name, '\n'.join(data)) if data else None


def _interrupt(response: requests.Response) -> None:
    """Wake a thread blocked reading ``response``: closing a response does not interrupt a read in progress,
    shutting its socket down does."""
    try:
        fd = response.raw.fileno()
    except (OSError, ValueError, AttributeError):  # no socket (any more)
        fd = -1
    if fd >= 0:
        # A duplicate of the descriptor: shutting it down ends the connection the reader waits on; closing
        # it leaves the reader's own descriptor to the reader.
        try:
            duplicate = socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM)
        except OSError:  # closed meanwhile (e.g. urllib3 released it at the end of the stream)
            duplicate = None
        if duplicate is not None:
            with duplicate:
                try:
                    duplicate.shutdown(socket.SHUT_RDWR)
                except OSError:  # already closed
                    pass
    response.close()


class WeightsSubscription:
    """Follows ``/weights/stream`` in a daemon thread until ``close()``.

    ``latest`` is the newest announcement (a dict with ``version``, ``sha256``, ``run_id``, ``signature``);
    ``take_announced()`` hands out the versions announced since the last call. ``connected`` says whether
    the stream is open now; ``connects`` counts successful connections (1 + reconnects), ``last_error`` why
    the last one ended or failed. ``wait_for_change(sha, timeout)`` blocks until an announcement whose sha
    differs from ``sha``.
    """

    def __init__(
        self,
        url: str,
        token: str | None,
        keepalive_timeout: float = 60.0,
        backoff: tuple[float, float] = (0.5, 10.0),
    ) -> None:
        self.url = url
        self.keepalive_timeout = float(keepalive_timeout)
        self.backoff = (float(backoff[0]), float(backoff[1]))
        self._session = requests.Session()
        self._session.trust_env = False
        if token:
            self._session.headers['Authorization'] = f'Bearer {token}'
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._response: requests.Response | None = None
        self._announced: list[int] = []
        self._thread = threading.Thread(target=self._run, name='weights-stream', daemon=True)
        self.latest: dict[str, Any] | None = None
        self.connected = False
        self.connects = 0
        self.events = 0
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._cond:
            # Under the lock: the reader closes its response only while holding it too, so the descriptor
            # shut down here is still the response's own.
            if self._response is not None:
                _interrupt(self._response)
            self._cond.notify_all()
        self._thread.join(timeout)
        self._session.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def take_announced(self) -> list[int]:
        with self._cond:
            versions, self._announced = self._announced, []
            return versions

    def wait_for_change(self, sha256: str | None, timeout: float) -> dict[str, Any] | None:
        """The newest announcement once its sha differs from ``sha256`` (None after ``timeout`` s)."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._stop.is_set() or (self.latest is not None and self.latest.get('sha256') != sha256),
                timeout,
            )
            latest = self.latest
        return latest if latest is not None and latest.get('sha256') != sha256 else None

    def _run(self) -> None:
        delay = self.backoff[0]
        while not self._stop.is_set():
            try:
                if self._follow():
                    delay = self.backoff[0]  # the stream was up: the next drop starts the backoff over
            except (requests.RequestException, OSError, ValueError, AttributeError) as exc:
                # AttributeError: requests' raw stream after close() from another thread
                self.last_error = f'{type(exc).__name__}: {exc}'
            finally:
                self.connected = False  # (_follow let go of the response itself)
            if self._stop.wait(delay):
                break
            _LOG.info('weights: stream %s ended (%s); reconnecting', self.url, self.last_error)
            delay = min(delay * 2, self.backoff[1])

    def _follow(self) -> bool:
        """Read one connection to its end; True when it was established."""
        response = self._session.get(self.url, stream=True, timeout=(10.0, self.keepalive_timeout))
        with self._cond:
            self._response = response
        try:
            return self._read(response)
        finally:
            with self._cond:  # closed under the lock: close() may be interrupting this very response
                self._response = None
                response.close()

    def _read(self, response: requests.Response) -> bool:
        """Announce the events of one open response until it ends; True when it was established."""
        if self._stop.is_set():
            return False
        if response.status_code != 200:
            self.last_error = f'HTTP {response.status_code}: {response.text[:200]!r}'
            return False
        self.connected = True
        self.connects += 1
        block: list[str] = []
        for raw in response.iter_lines():
            if self._stop.is_set():
                break
            line = raw.decode('utf-8', 'replace')
            if line:
                block.append(line)
                continue
            event = parse_sse_event(block)
            block = []
            if event is not None and event[0] == 'weights':
                self._announce(json.loads(event[1]))
        self.last_error = 'stream closed by the server'
        return True

    def _announce(self, data: Any) -> None:
        if not isinstance(data, dict) or not isinstance(data.get('version'), int):
            raise ValueError(f'malformed weights announcement {data!r}')
        with self._cond:
            self.latest = data
            self.events += 1
            self._announced.append(data['version'])
            self._cond.notify_all()


__all__ = ['WeightsSubscription', 'parse_sse_event']
