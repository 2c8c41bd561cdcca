"""A scripted ES worker for the server's tests (a real socket, the real protocol, every step chosen by the test),
a small real ES policy, and a server running with it."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

from ding.config.merge import deep_merge_dicts
from ding.policy.es import ESPolicy
from ding.worker.es.client import ConnectionClosed, ServerConnection
from ding.worker.es.config import ESServerSettings
from ding.worker.es.partial_buffer import UpdateThread
from ding.worker.es.protocol import Message
from ding.worker.es.server import ESServer

TOKEN = 'test-token'


def small_es_policy(population_size: int = 4, max_partial_lag: int = 2) -> ESPolicy:
    """A CartPole ES policy of a few hundred parameters."""
    cfg = dict(
        model=dict(
            obs_shape=4,
            action_shape=2,
            encoder_hidden_size_list=[16],
            actor_head_hidden_size=16,
            critic_head_hidden_size=16,
        ),  # fmt: skip
        noise_table=dict(seed=0, size=1 << 16),
        learn=dict(population_size=population_size, max_partial_lag=max_partial_lag),
        collect=dict(env=dict(env_id='CartPole-v1')),
    )
    return ESPolicy(deep_merge_dicts(ESPolicy.default_config(), cfg), enable_field=['learn', 'eval'])


class GatedUpdate:
    """The server's background update: ``policy.update`` then ``publish_model``, each one waiting until the test
    opens the gate (``hold()`` / ``release()``), so a test can keep an update running."""

    def __init__(self, policy: ESPolicy) -> None:
        self.policy = policy
        self.server: ESServer | None = None
        self.gate = threading.Event()
        self.gate.set()
        self.running = threading.Event()

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def __call__(self, partials: list[Any]) -> None:
        self.running.set()
        self.gate.wait(30.0)
        self.policy.update(partials)
        flat, version = self.policy.flat_parameters_with_version()
        assert self.server is not None
        self.server.publish_model(version, flat)
        self.running.clear()


@contextlib.contextmanager
def running_server(policy: ESPolicy, **settings: Any) -> Iterator[tuple[ESServer, GatedUpdate]]:
    """An ES server on 127.0.0.1 with ``settings`` and its update thread, both stopped on exit."""
    update = GatedUpdate(policy)
    server = ESServer(policy, ESServerSettings(**settings), TOKEN, policy.population_size)
    update.server = server
    thread = UpdateThread(server.take_batch, update)
    try:
        server.start()
        thread.start()
        yield server, update
    finally:
        update.release()
        thread.stop()
        server.stop()
    assert thread.error is None, thread.error


class FakeWorker:
    """One connection to the server, driven step by step."""

    def __init__(self, address: tuple[str, int], token: str = TOKEN, timeout: float = 20.0) -> None:
        self.conn = ServerConnection(*address, token)
        self.conn.sock.settimeout(timeout)

    def init(self) -> Message:
        """Ask for initialisation; the init reply."""
        self.conn.send('init')
        reply = self.conn.recv()
        assert reply.type == 'init', reply
        return reply

    def recv(self) -> Message:
        return self.conn.recv()

    def ack(self, chunk: Message) -> None:
        fields = chunk.fields
        self.conn.send('ack', {'version': fields['version'], 'offset': fields['offset'] + len(chunk.body)})

    def download(self, first: Message | None = None) -> tuple[int, bytes]:
        """Receive chunks (acknowledging each one but the last) until a model is complete: its version and bytes."""
        data = bytearray()
        chunk = first or self.recv()
        while True:
            assert chunk.type == 'chunk', chunk
            if chunk.fields['offset'] == 0:
                data = bytearray()
            data += chunk.body
            if len(data) == chunk.fields['total']:
                return chunk.fields['version'], bytes(data)
            self.ack(chunk)
            chunk = self.recv()

    def send_return(self, version: int, noise_id: int = 0, return_pos: float = 1.0, return_neg: float = 0.0) -> None:
        fields = {'noise_id': noise_id, 'return_pos': return_pos, 'return_neg': return_neg, 'version': version,
                  'env_steps': 10}  # fmt: skip
        self.conn.send('return', fields)

    def is_closed_by_server(self) -> bool:
        """Whether the server closed the connection (waits up to the socket timeout for its end)."""
        try:
            while self.conn.sock.recv(65536):
                pass
        except TimeoutError:
            return False
        except (ConnectionClosed, OSError):
            return True
        return True

    def still_served(self) -> bool:
        """Whether the connection is open: no end of stream within a short wait."""
        self.conn.sock.settimeout(0.2)
        try:
            return self.conn.sock.recv(1, socket.MSG_PEEK) != b''
        except TimeoutError:
            return True
        except OSError:
            return False
        finally:
            self.conn.sock.settimeout(20.0)

    def close(self) -> None:
        self.conn.close()


__all__ = ['FakeWorker', 'GatedUpdate', 'TOKEN', 'running_server', 'small_es_policy']
