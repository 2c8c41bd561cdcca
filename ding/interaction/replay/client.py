"""The replay service's client side: ``ReplayClient`` (one channel, the token on every call, bounded messages),
``Backoff`` (exponential, with jitter), ``insert_with_retry`` (a collector's insert that outlasts an outage) and
``PrioritySender`` (sends TD-error priorities back without blocking training). The learner's prefetching is
``ding.interaction.replay.prefetch``.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from ding.utils.host_port import parse_host_port

from .auth import TOKEN_METADATA, replay_token
from .codec import encode_batch
from .v1 import replay_pb2, replay_pb2_grpc

_LOG = logging.getLogger('ding.replay')

DEFAULT_MAX_MESSAGE_BYTES = 64 << 20
# Errors no retry can cure: the token is wrong, or the request / batch is refused as malformed.
FATAL_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED)


class ReplayError(RuntimeError):
    """The replay service refused a call for good (wrong token, malformed batch)."""


@dataclass
class Backoff:
    """Exponential backoff with jitter: the n-th consecutive failure waits ``min(cap, base * 2**(n-1))``
    scaled by a random factor in [0.5, 1] (so clients that failed together do not retry together)."""

    base: float = 0.05
    cap: float = 2.0

    def delay(self, failures: int) -> float:
        return min(self.cap, self.base * 2 ** max(0, failures - 1)) * random.uniform(0.5, 1.0)


class ReplayClient:
    """Calls of ``replay.v1.Replay`` on one channel; ``secret`` is the run secret (the token derives from it)."""

    def __init__(
        self,
        address: str,
        secret: str,
        timeout: float = 10.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        parse_host_port(address, 'replay address')
        self.address = address
        self.timeout = float(timeout)
        self._metadata = ((TOKEN_METADATA, replay_token(secret)),)
        options = [
            ('grpc.max_receive_message_length', int(max_message_bytes)),
            ('grpc.max_send_message_length', int(max_message_bytes)),
            # reconnect quickly after the server comes back (the default backoff reaches minutes)
            ('grpc.initial_reconnect_backoff_ms', 100),
            ('grpc.max_reconnect_backoff_ms', 1000),
        ]
        self._channel = grpc.insecure_channel(self.address, options=options)
        self._stub = replay_pb2_grpc.ReplayStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def insert(self, items: Sequence[Mapping[str, Any]], collector_envstep: int = -1) -> replay_pb2.InsertResponse:
        """Store ``items`` (transition dicts); raises ``grpc.RpcError`` / ``EncodingError``."""
        request = replay_pb2.InsertRequest(batch=encode_batch(items), collector_envstep=int(collector_envstep))
        return self._stub.Insert(request, timeout=self.timeout, metadata=self._metadata)

    def sample_raw(self, batch_size: int, learner_iter: int, batch_count: int = 1) -> replay_pb2.SampleResponse:
        request = replay_pb2.SampleRequest(
            batch_size=int(batch_size), learner_iter=int(learner_iter), batch_count=int(batch_count)
        )
        return self._stub.Sample(request, timeout=self.timeout, metadata=self._metadata)

    def update_priorities(self, ids: Sequence[str], idxs: Sequence[int], priorities: Sequence[float]) -> None:
        request = replay_pb2.UpdatePrioritiesRequest(
            replay_unique_id=list(ids),
            replay_buffer_idx=[int(i) for i in idxs],
            priority=[float(p) for p in priorities],
        )
        self._stub.UpdatePriorities(request, timeout=self.timeout, metadata=self._metadata)

    def status(self) -> replay_pb2.StatusResponse:
        return self._stub.Status(replay_pb2.StatusRequest(), timeout=self.timeout, metadata=self._metadata)


def is_fatal(error: grpc.RpcError) -> bool:
    code = error.code() if isinstance(error, grpc.Call) else None
    return code in FATAL_CODES


def describe(error: grpc.RpcError) -> str:
    if isinstance(error, grpc.Call):
        return f'{error.code().name}: {error.details()}'
    return repr(error)


def insert_with_retry(
    client: ReplayClient,
    items: Sequence[Mapping[str, Any]],
    collector_envstep: int = -1,
    stop: threading.Event | None = None,
    backoff: Backoff | None = None,
    on_retry: Callable[[int, str], None] | None = None,
) -> replay_pb2.InsertResponse | None:
    """Insert ``items``, retrying with backoff until it succeeds (nothing is dropped during an outage) or
    ``stop`` is set (then None). Fatal refusals raise ``ReplayError``."""
    backoff = backoff or Backoff()
    failures = 0
    while stop is None or not stop.is_set():
        try:
            return client.insert(items, collector_envstep)
        except grpc.RpcError as exc:
            if is_fatal(exc):
                raise ReplayError(f'replay service at {client.address} refused the insert: {describe(exc)}') from None
            failures += 1
            if on_retry is not None:
                on_retry(failures, describe(exc))
            wait = backoff.delay(failures)
            if stop is None:
                time.sleep(wait)
            elif stop.wait(wait):
                break
    return None


class PrioritySender:
    """Sends priority updates from a thread so training never waits on them. Updates wait in a bounded queue;
    when it is full (the service is away) the oldest update is dropped and counted in ``dropped``: priorities
    are refreshed by the next samples anyway."""

    def __init__(self, client: ReplayClient, max_pending: int = 64, backoff: Backoff | None = None) -> None:
        self.client = client
        self._queue: queue.Queue[tuple[list[str], list[int], list[float]]] = queue.Queue(maxsize=max_pending)
        self._backoff = backoff or Backoff()
        self._stop = threading.Event()
        self.sent = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name='replay-priorities', daemon=True)
        self._thread.start()

    def send(self, info: Mapping[str, Any]) -> None:
        """Queue ``info`` (``replay_unique_id``, ``replay_buffer_idx``, ``priority``: the learner's
        ``priority_info``)."""
        priority = info['priority']
        if hasattr(priority, 'tolist'):
            priority = priority.tolist()
        idxs = info['replay_buffer_idx']
        if hasattr(idxs, 'tolist'):
            idxs = idxs.tolist()
        update = ([str(u) for u in info['replay_unique_id']], [int(i) for i in idxs], [float(p) for p in priority])
        while True:
            try:
                self._queue.put_nowait(update)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.client.timeout + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ids, idxs, priorities = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            failures = 0
            while not self._stop.is_set():
                try:
                    self.client.update_priorities(ids, idxs, priorities)
                    self.sent += 1
                    break
                except grpc.RpcError as exc:
                    if is_fatal(exc):
                        _LOG.warning('replay service refused a priority update: %s', describe(exc))
                        self.dropped += 1
                        break
                    failures += 1
                    if self._queue.full():  # newer updates are waiting: this one is not worth keeping
                        self.dropped += 1
                        break
                    self._stop.wait(self._backoff.delay(failures))


__all__ = [
    'DEFAULT_MAX_MESSAGE_BYTES',
    'Backoff',
    'ReplayClient',
    'ReplayError',
    'PrioritySender',
    'insert_with_retry',
]
