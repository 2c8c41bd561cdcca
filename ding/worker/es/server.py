"""The ES learner server: one asyncio event loop (on its own thread) that serves every worker over TCP.

Each event of the learner-event table (docs/es.md) is one method below, run on the loop thread (no locks on
the server's state); each is logged (``logger``) and counted (``stats``):

- valid packet: ``init`` -> ``_on_init_request`` (the init reply carries the worker spec and noise seed,
  then a model download signal); ``return`` -> ``_on_episode_return`` (the gradient partial, then "partial
  received"); ``ack`` -> the next chunk signal; an unknown type -> logged, nothing else;
- invalid packet -> logged and counted; a fatal one (wrong MAC / token, out-of-bounds length) closes the
  connection, an authentic but malformed one is skipped;
- worker connected -> the initialisation-timeout signal queued; worker disconnected -> its download removed;
- partial received -> the double buffer (``partial_buffer``); the update runs on another thread, which
  publishes the new model with ``publish_model`` -> model update -> a download signal for every worker;
- download and chunk signals -> ``downloads.DownloadTable`` (recent: skipped update; very old: reset).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .config import ESServerSettings
from .downloads import DownloadStart, DownloadTable, ModelImage
from .partial_buffer import Added, PartialBuffer
from .protocol import FrameCodec, Message, ProtocolError, hello, new_nonce, session_key
from .stats import ESServerStats

DROP_WARNING_INTERVAL = 5.0  # seconds between two "partials dropped" warnings (each drop is counted)


class ESLearner(Protocol):
    """What the server needs of the ES policy (``ding.policy.es.ESPolicy``)."""

    @property
    def version(self) -> int: ...

    def flat_parameters(self) -> np.ndarray: ...

    def make_partial(self, noise_id: int, return_pos: float, return_neg: float, model_version: int) -> Any: ...

    def worker_spec(self) -> dict: ...


def model_image(version: int, flat: np.ndarray) -> ModelImage:
    """What a download sends of a model: its parameters as little-endian float32 bytes."""
    return ModelImage(int(version), np.ascontiguousarray(flat, dtype='<f4').tobytes())


@dataclass(eq=False)
class WorkerLink:
    """One connected worker (ids are never reused: a reconnecting worker is a new one)."""

    worker_id: int
    writer: asyncio.StreamWriter
    codec: FrameCodec
    peer: str
    initialised: bool = False
    connected_at: float = field(default_factory=time.monotonic)

    def send(self, frame: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(frame)


class ESServer:
    """Serves ES workers on ``settings.host:settings.port`` with the run ``token``; the partial buffer holds
    ``capacity`` partials (the population of one update). ``start()`` / ``stop()``; the update side calls
    ``take_batch`` and ``publish_model`` from its own thread."""

    def __init__(
        self,
        policy: ESLearner,
        settings: ESServerSettings,
        token: str,
        capacity: int,
        seed: int = 0,
        logger: logging.Logger | None = None,
        stats: ESServerStats | None = None,
    ) -> None:
        if not token:
            raise ValueError('ESServer: an empty token would let anyone join')
        self.policy = policy
        self.settings = settings
        self.seed = seed
        self.logger = logger or logging.getLogger('ding.worker.es.server')
        self.stats = stats or ESServerStats()
        self.buffer = PartialBuffer(capacity)
        self.downloads = DownloadTable(settings.chunk_bytes, settings.very_old_lag)
        self.address: tuple[str, int] | None = None
        self.error: BaseException | None = None
        self._token = token
        self._latest = model_image(policy.version, policy.flat_parameters())
        self._spec = dict(policy.worker_spec())
        self._links: dict[int, WorkerLink] = {}
        self._next_id = 0
        self._last_drop_warning = float('-inf')
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name='ding-es-server', daemon=True)

    # ---- control (any thread) ------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> tuple[str, int]:
        """Start listening; the ``(host, port)`` bound."""
        self._thread.start()
        if not self._listening.wait(timeout) or self.address is None:
            raise RuntimeError(f'the ES server did not start listening on {self.settings.host}:{self.settings.port}: '
                               f'{self.error!r}')  # fmt: skip
        return self.address

    def stop(self, timeout: float = 10.0) -> None:
        """Close every connection (workers see the end of the stream and exit) and the listener."""
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:
                pass  # the loop already closed
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def take_batch(self, timeout: float | None = None) -> list[Any] | None:
        """The next full buffer of partials for the update (None after ``timeout`` seconds)."""
        return self.buffer.take(timeout)

    def publish_model(self, version: int, flat: np.ndarray) -> None:
        """The update finished: signal "model update" with the new parameters (thread-safe)."""
        image = model_image(version, flat)
        assert self._loop is not None, 'start() first'
        try:
            self._loop.call_soon_threadsafe(self._on_model_update, image)
        except RuntimeError:
            pass  # the server stopped meanwhile: no worker is left to send it to

    # ---- the loop thread -------------------------------------------------------------------------
    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        server: asyncio.Server | None = None
        try:
            server = loop.run_until_complete(
                asyncio.start_server(self._serve, self.settings.host, self.settings.port, limit=2**16)
            )
            host, port = server.sockets[0].getsockname()[:2]
            self.address = (host, port)
            self.logger.info(f'es server: listening on {host}:{port}')
            self._listening.set()
            loop.run_forever()
        except BaseException as exc:
            self.error = exc
        finally:
            self._listening.set()
            for link in list(self._links.values()):
                link.writer.close()
            if server is not None:
                server.close()
            loop.run_until_complete(self._drain_tasks(loop))
            loop.close()

    @staticmethod
    async def _drain_tasks(loop: asyncio.AbstractEventLoop) -> None:
        tasks = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonce = new_nonce()
        codec = FrameCodec(session_key(self._token, nonce), 'server', self.settings.max_frame_bytes)
        peer = writer.get_extra_info('peername')
        link = WorkerLink(self._next_id, writer, codec, f'{peer[0]}:{peer[1]}' if peer else '?')
        self._next_id += 1
        self._on_connected(link, nonce)
        try:
            while True:
                prefix = await reader.readexactly(4)
                try:
                    frame = await reader.readexactly(codec.frame_length(prefix))
                    message = codec.decode(frame)
                except ProtocolError as exc:
                    self._on_invalid_packet(link, exc)
                    if exc.fatal:
                        break
                    continue
                self._on_valid_packet(link, message)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the worker went away
        except asyncio.CancelledError:
            pass  # the server is stopping (ending normally: asyncio logs a cancelled connection task as an error)
        finally:
            self._on_disconnected(link)
            writer.close()

    # ---- network events --------------------------------------------------------------------------
    def _on_connected(self, link: WorkerLink, nonce: bytes) -> None:
        self._links[link.worker_id] = link
        self.stats.add('connected_workers')
        self.logger.info(f'es server: worker {link.worker_id} connected from {link.peer}')
        link.send(hello(nonce))
        assert self._loop is not None
        self._loop.call_later(self.settings.init_timeout, self._on_init_timeout, link)

    def _on_disconnected(self, link: WorkerLink) -> None:
        if self._links.pop(link.worker_id, None) is None:
            return
        had_download = self.downloads.remove(link.worker_id)
        self.stats.add('connected_workers', -1)
        if link.initialised:
            self.stats.add('initialised_workers', -1)
        self.stats.add('disconnects')
        self.logger.info(
            f'es server: worker {link.worker_id} disconnected' + (' (its download removed)' if had_download else '')
        )

    def _on_invalid_packet(self, link: WorkerLink, exc: ProtocolError) -> None:
        self.stats.add('invalid_packets')
        action = 'closing the connection' if exc.fatal else 'packet ignored'
        self.logger.warning(f'es server: invalid packet from worker {link.worker_id} ({link.peer}): {exc}; {action}')

    def _on_valid_packet(self, link: WorkerLink, message: Message) -> None:
        if message.type == 'init':
            self._on_init_request(link)
        elif not link.initialised and message.type in ('return', 'ack'):
            self._on_invalid_packet(link, ProtocolError(f'{message.type!r} before initialisation', fatal=False))
        elif message.type == 'return':
            self._on_episode_return(link, message.fields)
        elif message.type == 'ack':
            self._on_ack(link, message.fields)
        else:
            self.stats.add('unknown_packets')
            self.logger.warning(f'es server: worker {link.worker_id} sent an unknown packet type {message.type!r}')

    def _on_init_request(self, link: WorkerLink) -> None:
        if link.initialised:
            self._on_invalid_packet(link, ProtocolError('a second initialisation request', fatal=False))
            return
        link.initialised = True
        self.stats.add('initialised_workers')
        fields = {'worker_id': link.worker_id, 'seed': self.seed + link.worker_id, 'spec': self._spec}
        link.send(link.codec.encode('init', fields))
        self.logger.info(f'es server: worker {link.worker_id} initialised (noise seed {self.seed + link.worker_id})')
        self._signal_download(link)

    def _on_episode_return(self, link: WorkerLink, fields: Mapping[str, Any]) -> None:
        if fields['env_steps'] < 0:
            self._on_invalid_packet(link, ProtocolError(f'env_steps {fields["env_steps"]} < 0', fatal=False))
            return
        try:
            partial = self.policy.make_partial(
                fields['noise_id'], float(fields['return_pos']), float(fields['return_neg']), fields['version']
            )
        except (ValueError, TypeError) as exc:  # e.g. a noise id outside the table, a return that is not finite
            self._on_invalid_packet(link, ProtocolError(f'return refused: {exc}', fatal=False))
            return
        self.stats.add('env_steps', fields['env_steps'])
        if partial is None:
            self.stats.add('stale_partials')
            self.logger.debug(
                f'es server: return of worker {link.worker_id} for model {fields["version"]} dropped as stale '
                f'(current model {self.policy.version})'
            )
            return
        self._on_partial_received(link, partial)

    def _on_ack(self, link: WorkerLink, fields: Mapping[str, Any]) -> None:
        if link.worker_id not in self.downloads:
            self._on_invalid_packet(link, ProtocolError('a chunk acknowledged with no download in progress', False))
            return
        self._on_chunk_signal(link)

    # ---- signals ---------------------------------------------------------------------------------
    def _on_init_timeout(self, link: WorkerLink) -> None:
        if link.initialised or self._links.get(link.worker_id) is not link:
            return
        self.stats.add('init_timeouts')
        self.logger.warning(
            f'es server: worker {link.worker_id} ({link.peer}) did not ask for initialisation within '
            f'{self.settings.init_timeout} s; disconnecting it'
        )
        link.writer.close()

    def _on_partial_received(self, link: WorkerLink, partial: Any) -> None:
        self.stats.add('partials_received')
        added = self.buffer.add(partial)
        if added is Added.DROPPED:
            self.stats.add('dropped_partials')
            now = time.monotonic()
            if now - self._last_drop_warning >= DROP_WARNING_INTERVAL:
                self._last_drop_warning = now
                self.logger.warning(
                    'es server: both partial buffers are full (the update is slower than the workers): partial '
                    f'of worker {link.worker_id} dropped ({self.stats["dropped_partials"]} dropped so far)'
                )
        elif added is Added.HANDED_OFF:
            self.logger.debug(f'es server: buffer of {self.buffer.capacity} partials handed to the update')

    def _signal_download(self, link: WorkerLink) -> None:
        started = self.downloads.signal_download(link.worker_id, self._latest)
        if started is DownloadStart.STARTED:
            assert self._loop is not None
            self._loop.call_soon(self._on_chunk_signal, link)
        elif started is DownloadStart.SKIPPED_RECENT:
            self.stats.add('skipped_model_updates')
            self.logger.debug(f'es server: worker {link.worker_id} skips model {self._latest.version} (download busy)')
        else:
            self.logger.info(f'es server: the download of worker {link.worker_id} is very old; reset on its next chunk')

    def _on_chunk_signal(self, link: WorkerLink) -> None:
        if self._links.get(link.worker_id) is not link:
            return  # disconnected meanwhile (its download is gone)
        chunk = self.downloads.signal_chunk(link.worker_id, self._latest)
        if chunk is None:
            return
        if chunk.reset:
            self.stats.add('download_resets')
            self.logger.info(f'es server: download of worker {link.worker_id} reset to model {chunk.version}')
        fields = {'version': chunk.version, 'offset': chunk.offset, 'total': chunk.total}
        link.send(link.codec.encode('chunk', fields, chunk.data))
        self.stats.add('bytes_sent', len(chunk.data))
        if chunk.last:
            self.stats.add('downloads_completed')
            self.logger.debug(f'es server: worker {link.worker_id} got model {chunk.version}')

    def _on_model_update(self, image: ModelImage) -> None:
        if self.buffer.update_done():
            self.logger.debug('es server: the buffer that filled during the update went to the next one')
        if image.version == self._latest.version:
            return  # the update used no partial (all had become stale): the workers have this model
        self._latest = image
        self.stats.add('model_updates')
        self.logger.debug(f'es server: model {image.version} published')
        for link in list(self._links.values()):
            if link.initialised:
                self._signal_download(link)


__all__ = ['ESLearner', 'ESServer', 'WorkerLink', 'model_image']
