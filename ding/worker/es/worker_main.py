"""An ES worker process: connects to the learner's ES server, asks for initialisation (the worker spec: env,
model, noise table), then evaluates antithetic noise pairs with the newest model it has and sends each pair's
returns. A receiver thread takes model downloads chunk by chunk (acknowledging each but the last) while the main
thread keeps evaluating with the model it has.

``ding es-worker --connect HOST:PORT --token T`` (or the token in ``$DING_RUN_SECRET``; the pipeline's local
workers get it there, never on their command line). Exits 0 when the server goes away or on SIGTERM; 2 on bad
arguments; 3 when the server cannot be reached, refuses the token, breaks the protocol or describes a rollout
this worker cannot build.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

import numpy as np

from .client import ConnectionClosed, ServerConnection
from .protocol import Message, ProtocolError
from .rollout import ESRollout

RUN_SECRET_ENV = 'DING_RUN_SECRET'
EXIT_UNREACHABLE = 3
MAX_MODEL_BYTES = 2**30


class ModelReceiver(threading.Thread):
    """Reads the server's frames: assembles model downloads (acknowledging every chunk but the last) and
    keeps the newest complete model for ``take()``. ``closed`` is set when the stream ends."""

    def __init__(self, conn: ServerConnection) -> None:
        super().__init__(name='ding-es-receiver', daemon=True)
        self.conn = conn
        self.closed = threading.Event()
        self.error: BaseException | None = None
        self._ready = threading.Condition()
        self._model: tuple[int, np.ndarray] | None = None
        self._assembling: tuple[int, bytearray] | None = None
        self._expected_offset = 0

    def run(self) -> None:
        try:
            while True:
                self._on_message(self.conn.recv())
        except ConnectionClosed:
            pass
        except BaseException as exc:  # a frame that does not verify: the stream cannot be trusted
            self.error = exc
        finally:
            with self._ready:
                self.closed.set()
                self._ready.notify_all()

    def _on_message(self, message: Message) -> None:
        if message.type != 'chunk':
            print(f'[ding] es worker: ignored a {message.type!r} message', file=sys.stderr, flush=True)
            return
        version, offset, total = message.fields['version'], message.fields['offset'], message.fields['total']
        if offset == 0:  # a new download, or one the server reset to a newer model
            if not 0 < total <= MAX_MODEL_BYTES or total % 4:
                raise ProtocolError(f'model of {total} bytes announced', fatal=True)
            self._assembling = (version, bytearray(total))
            self._expected_offset = 0
        if self._assembling is None or self._assembling[0] != version or offset != self._expected_offset:
            raise ProtocolError(f'chunk of model {version} at {offset} out of order', fatal=True)
        buffer = self._assembling[1]
        end = offset + len(message.body)
        if end > len(buffer) or total != len(buffer) or not message.body:
            raise ProtocolError(f'chunk [{offset}, {end}) does not fit model of {len(buffer)} bytes', fatal=True)
        buffer[offset:end] = message.body
        self._expected_offset = end
        if end < total:
            self.conn.send('ack', {'version': version, 'offset': end})
            return
        flat = np.frombuffer(bytes(buffer), dtype='<f4').astype(np.float32)
        self._assembling = None
        with self._ready:
            self._model = (version, flat)
            self._ready.notify_all()

    def take(self, wait: bool = False) -> tuple[int, np.ndarray] | None:
        """The newest complete model not taken yet (None if none); ``wait``: block until one or the end."""
        with self._ready:
            if wait:
                self._ready.wait_for(lambda: self._model is not None or self.closed.is_set())
            model, self._model = self._model, None
            return model


def run_worker(host: str, port: int, token: str) -> int:
    """Serve the ES server at ``host:port`` until it goes away; the exit code."""
    try:
        conn = ServerConnection(host, port, token)
    except (OSError, ProtocolError) as exc:
        print(f'[ding] es worker: cannot connect to {host}:{port}: {exc}', file=sys.stderr, flush=True)
        return EXIT_UNREACHABLE
    receiver: ModelReceiver | None = None
    try:
        try:
            conn.send('init')
            reply = conn.recv()
        except (ConnectionClosed, ProtocolError) as exc:
            print(f'[ding] es worker: not initialised by {host}:{port} (is the token right?): {exc}', file=sys.stderr)
            return EXIT_UNREACHABLE
        if reply.type != 'init':
            print(f'[ding] es worker: expected the init reply, got {reply.type!r}', file=sys.stderr)
            return EXIT_UNREACHABLE
        try:
            rollout = ESRollout.from_spec(reply.fields['spec'], reply.fields['seed'])
        except ValueError as exc:  # a spec this worker cannot build (another version, an env it lacks)
            print(f'[ding] es worker: cannot build the rollout the server describes: {exc}', file=sys.stderr)
            return EXIT_UNREACHABLE
        receiver = ModelReceiver(conn)
        receiver.start()
        return _evaluate_until_closed(conn, receiver, rollout)
    finally:
        conn.close()
        if receiver is not None:
            receiver.join(5.0)


def _evaluate_until_closed(conn: ServerConnection, receiver: ModelReceiver, rollout: Any) -> int:
    model = receiver.take(wait=True)
    if model is None:
        return _closed_code(receiver)
    version = model[0]
    rollout.set_parameters(model[1], version)
    while not receiver.closed.is_set():
        newer = receiver.take()
        if newer is not None:
            version = newer[0]
            rollout.set_parameters(newer[1], version)
        noise_id = int(rollout.next_noise_id())
        return_pos, return_neg, env_steps = rollout.evaluate(noise_id)
        fields = {'noise_id': noise_id, 'return_pos': float(return_pos), 'return_neg': float(return_neg),
                  'version': version, 'env_steps': int(env_steps)}  # fmt: skip
        try:
            conn.send('return', fields)
        except ConnectionClosed:
            break
    return _closed_code(receiver)


def _closed_code(receiver: ModelReceiver) -> int:
    receiver.closed.wait(5.0)
    if receiver.error is not None:
        print(f'[ding] es worker: the server broke the protocol: {receiver.error}', file=sys.stderr, flush=True)
        return EXIT_UNREACHABLE
    return 0  # the server stopped: nothing left to do


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(':')
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'--connect expects HOST:PORT, got {text!r}')
    return host.strip('[]'), int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='ding es-worker', description=__doc__.split('\n\n')[0])
    parser.add_argument('--connect', required=True, metavar='HOST:PORT', help="the ES server's address (logged)")
    parser.add_argument('--token', help=f'the run token (default: ${RUN_SECRET_ENV})')
    args = parser.parse_args(argv)
    token = args.token or os.environ.get(RUN_SECRET_ENV, '')
    if not token:
        parser.error(f'no token: pass --token or set ${RUN_SECRET_ENV}')
    try:
        host, port = parse_address(args.connect)
    except ValueError as exc:
        parser.error(str(exc))
    signal.signal(signal.SIGTERM, _terminate)
    return run_worker(host, port, token)


if __name__ == '__main__':
    sys.exit(main())
