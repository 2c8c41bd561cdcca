"""The replay service: any of ding's replay buffers (``create_buffer``) behind ``replay.v1.Replay`` over gRPC.

Every call is authenticated before its message is parsed (``TokenInterceptor``); messages are bounded by
``max_message_bytes``; every inserted batch is checked against its own encoding metadata and, after the first
insert, against the encoding that insert fixed (the fields, dtypes and shapes of one run's transitions).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from ding.interaction.replay.auth import replay_token, token_matches
from ding.interaction.replay.client import DEFAULT_MAX_MESSAGE_BYTES
from ding.interaction.replay.codec import (
    MAX_BATCH_ITEMS,
    Encoding,
    EncodingError,
    batch_encoding,
    check_encoding,
    decode_batch,
    encode_batch,
    encoding_message,
    unstack,
)
from ding.interaction.replay.v1 import replay_pb2, replay_pb2_grpc
from ding.worker.replay_buffer import IBuffer

# Keys the buffer adds to the items it hands out: they travel in their own message fields.
_BOOKKEEPING = ('replay_unique_id', 'replay_buffer_idx', 'IS', 'priority')


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses (UNAUTHENTICATED) any call whose metadata lacks the run's token, before its message is read."""

    def __init__(self, secret: str) -> None:
        self._token = replay_token(secret)

        def refuse(request: Any, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, 'missing or wrong replay token')

        # takes the raw bytes (no deserializer): a refused call's payload is never parsed
        self._refusal = grpc.unary_unary_rpc_method_handler(refuse)

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any], handler_call_details: grpc.HandlerCallDetails
    ) -> Any:
        if token_matches(self._token, handler_call_details.invocation_metadata):
            return continuation(handler_call_details)
        return self._refusal


class ReplayServicer(replay_pb2_grpc.ReplayServicer):
    """Serves one buffer. ``buffer_type`` is reported by ``Status``."""

    def __init__(self, buffer: IBuffer, buffer_type: str = '') -> None:
        self.buffer = buffer
        self.buffer_type = buffer_type
        self._encoding: Encoding | None = None
        self._lock = threading.Lock()
        self.sample_count = 0  # items served by Sample calls

    @property
    def encoding(self) -> Encoding | None:
        return self._encoding

    def Insert(self, request: replay_pb2.InsertRequest, context: grpc.ServicerContext) -> replay_pb2.InsertResponse:
        try:
            encoding = batch_encoding(request.batch)
            with self._lock:
                if self._encoding is None:
                    self._encoding = encoding
                check_encoding(encoding, self._encoding, 'insert')
            fields = decode_batch(request.batch)
        except EncodingError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        # the items keep views into this request's bytes: one allocation per inserted batch
        self.buffer.push(unstack(fields, request.batch.size), cur_collector_envstep=request.collector_envstep)
        return replay_pb2.InsertResponse(count=self.buffer.count(), push_count=self.buffer.push_count)

    def Sample(self, request: replay_pb2.SampleRequest, context: grpc.ServicerContext) -> replay_pb2.SampleResponse:
        n = request.batch_size * max(1, request.batch_count)
        if not 0 < n <= MAX_BATCH_ITEMS:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f'batch_size * batch_count must be in [1, {MAX_BATCH_ITEMS}], got {request.batch_size} * '
                f'{request.batch_count}',
            )
        count = self.buffer.count()
        if request.batch_count > 1:  # as many of the batches as the buffer holds items for (at least one)
            n = request.batch_size * max(1, min(request.batch_count, count // max(1, request.batch_size)))
        items = self.buffer.sample(n, int(request.learner_iter)) if count else None
        if not items:
            return replay_pb2.SampleResponse(ready=False, count=count)
        if request.batch_count > 1:  # each batch a random subset (a prioritised draw comes ordered by stratum)
            random.shuffle(items)
        with self._lock:
            self.sample_count += len(items)
        return replay_pb2.SampleResponse(
            ready=True,
            batch=encode_batch(items, skip=_BOOKKEEPING),
            replay_unique_id=[str(item['replay_unique_id']) for item in items],
            replay_buffer_idx=[int(item['replay_buffer_idx']) for item in items],
            is_weight=[float(item.get('IS', 1.0)) for item in items],
            count=count,
        )

    def UpdatePriorities(
        self, request: replay_pb2.UpdatePrioritiesRequest, context: grpc.ServicerContext
    ) -> replay_pb2.UpdatePrioritiesResponse:
        n = len(request.replay_unique_id)
        if not n == len(request.replay_buffer_idx) == len(request.priority):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, 'replay_unique_id, replay_buffer_idx, priority differ in length'
            )
        try:
            self.buffer.update(
                {
                    'replay_unique_id': list(request.replay_unique_id),
                    'replay_buffer_idx': list(request.replay_buffer_idx),
                    'priority': list(request.priority),
                }
            )
        except (KeyError, ValueError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return replay_pb2.UpdatePrioritiesResponse()

    def Status(self, request: replay_pb2.StatusRequest, context: grpc.ServicerContext) -> replay_pb2.StatusResponse:
        encoding = self._encoding
        return replay_pb2.StatusResponse(
            buffer_type=self.buffer_type,
            count=self.buffer.count(),
            push_count=self.buffer.push_count,
            encoding=encoding_message(encoding) if encoding else None,
            sample_count=self.sample_count,
        )


class ReplayServer:
    """A gRPC server holding ``buffer``: ``start()`` binds ``host:port`` (port 0: a free one, see ``port``)."""

    def __init__(
        self,
        buffer: IBuffer,
        secret: str,
        host: str = '127.0.0.1',
        port: int = 0,
        buffer_type: str = '',
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_workers: int = 4,
    ) -> None:
        self.servicer = ReplayServicer(buffer, buffer_type)
        self.host = host
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix='replay-server'),
            interceptors=[TokenInterceptor(secret)],
            options=[
                ('grpc.max_receive_message_length', int(max_message_bytes)),
                ('grpc.max_send_message_length', int(max_message_bytes)),
                ('grpc.so_reuseport', 0),  # a second server on a taken port fails instead of sharing it
            ],
        )
        replay_pb2_grpc.add_ReplayServicer_to_server(self.servicer, self._server)
        self.port = int(port)
        self._requested_port = int(port)

    @property
    def address(self) -> str:
        return f'{self.host}:{self.port}'

    def start(self) -> ReplayServer:
        bound = self._server.add_insecure_port(f'{self.host}:{self._requested_port}')
        if bound == 0:
            raise OSError(f'replay server: cannot listen on {self.host}:{self._requested_port}')
        self.port = bound
        self._server.start()
        return self

    def stop(self, grace: float | None = 1.0) -> None:
        self._server.stop(grace).wait()

    def wait(self) -> None:
        self._server.wait_for_termination()


__all__ = ['ReplayServer', 'ReplayServicer', 'TokenInterceptor']
