"""What a hostile client costs a live worker: a real ``LearnerSlave`` in a child process on 127.0.0.1.

    python benchmarks/http_limits.py [--bodies 100] [--body-mb 20] [--half-open 300] [--root PATH] [--tls]

(a) RSS of the worker before and after ``--bodies`` unauthenticated ``POST /connect`` requests of ``--body-mb`` MB
    each (the whole body is sent, as an attacker would): the growth must stay a few MB.
(b) ``--half-open`` connections that send half a request and stall: how many the server refuses at once (over
    its connection cap), how many it closes at its read timeout, and how many are still open after it.
(c) with one client connected and silent, how long a good client waits for ``GET /ping``.
``--tls``: the worker serves HTTPS (certificates made with openssl, tests/helpers/tls.py); every client speaks TLS,
and a stalled connection of (b) and (c) is one that never starts its handshake.
``--root`` runs the worker from another checkout (e.g. the code before the limits) to compare. Prints a table.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The worker: a LearnerSlave with callbacks that are never reached (nobody authenticated connects); with
# $BENCH_TLS (cert, key, CA paths) it serves HTTPS.
WORKER = """
import os, sys
from ding.interaction import config
from ding.worker.learner.comm.learner_slave import LearnerSlave
names = list(LearnerSlave.TASKS.values()) + ['deal_with_lost_master']
tls = {}
if os.environ.get('BENCH_TLS'):
    from ding.utils.tls import TlsSettings
    tls['tls'] = TlsSettings(*os.environ['BENCH_TLS'].split(os.pathsep))
slave = LearnerSlave('127.0.0.1', 0, {name: (lambda *a: {}) for name in names}, **tls)
slave.start()
print(slave.port, getattr(config, 'DEFAULT_READ_TIMEOUT', 0), getattr(config, 'DEFAULT_MAX_CONNECTIONS', 0), flush=True)
sys.stdin.read()  # until the benchmark closes our stdin
slave.close()
"""


# The clients' TLS context (None: plain HTTP), set by main() with --tls.
CLIENT_TLS: ssl.SSLContext | None = None


def open_connection(port: int, timeout: float, handshake: bool = True) -> socket.socket:
    """A connection to the worker; over TLS when ``CLIENT_TLS`` is set and ``handshake``."""
    sock = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    if CLIENT_TLS is not None and handshake:
        return CLIENT_TLS.wrap_socket(sock, server_hostname='127.0.0.1')
    return sock


def rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of ``pid`` in MB, from /proc."""
    fields = {}
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            key, _, value = line.partition(':')
            fields[key] = value.split()
    return int(fields['VmRSS'][0]) / 1024, int(fields['VmHWM'][0]) / 1024


def post_connect_body(port: int, size: int) -> str:
    """Send one unauthenticated /connect with a ``size``-byte body; returns the answer's status (or the error)."""
    head = (
        f'POST /connect HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nChannel: 0\r\nToken: attacker\r\n'
        f'Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n'
    ).encode()
    body = b'{"master": {"address": "http://127.0.0.1:1"}, "pad": "' + b'x' * (size - 56) + b'"}'
    with open_connection(port, timeout=60) as sock:
        try:
            sock.sendall(head + body)
        except OSError as err:  # the server answered and closed before taking the whole body
            return type(err).__name__
        try:
            answer = sock.recv(64)
        except OSError as err:
            return type(err).__name__
    return answer.split(b' ')[1].decode() if answer.startswith(b'HTTP/') else 'closed'


def big_bodies(port: int, count: int, size: int, threads: int = 4) -> dict[str, int]:
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    todo = list(range(count))

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            status = post_connect_body(port, size)
            with lock:
                statuses[status] = statuses.get(status, 0) + 1

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return statuses


def half_open(port: int, count: int, wait: float, read_timeout: float) -> dict[str, tuple[int, float]]:
    """Open ``count`` stalled requests and watch them until closed (or ``wait`` s). Returns, per outcome ('503',
    'refused': closed unanswered before half the read timeout, 'closed': later, 'open'), how many and the longest
    time a connection of it lived, from its own opening."""
    selector = selectors.DefaultSelector()
    opened: dict[socket.socket, float] = {}
    for _ in range(count):
        sock = open_connection(port, timeout=5, handshake=False)
        if CLIENT_TLS is None:  # over TLS the connection stalls before its handshake
            sock.sendall(b'POST /connect HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le')
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        opened[sock] = time.monotonic()
    answered: set[socket.socket] = set()
    lived: dict[socket.socket, float] = {}
    deadline = time.monotonic() + wait
    while len(lived) < count and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except OSError:
                data = b''
            if data:
                answered.update([sock] if data.startswith(b'HTTP/1.1 503') else [])
                continue  # its close follows
            lived[sock] = time.monotonic() - opened[sock]
            selector.unregister(sock)
    outcomes: dict[str, list[float]] = {'503': [], 'refused': [], 'closed': [], 'open': []}
    now = time.monotonic()
    for sock, start in opened.items():
        if sock not in lived:
            outcomes['open'].append(now - start)
        else:
            unanswered = 'refused' if lived[sock] < read_timeout / 2 else 'closed'
            outcomes['503' if sock in answered else unanswered].append(lived[sock])
        sock.close()
    selector.close()
    return {k: (len(v), max(v, default=0.0)) for k, v in outcomes.items()}


def ping_seconds(port: int) -> float:
    """Seconds a good client waits for ``GET /ping`` while another connection is open and silent."""
    with open_connection(port, timeout=60, handshake=False):
        time.sleep(0.2)  # let the server accept the silent one first
        started = time.monotonic()
        with open_connection(port, timeout=60) as sock:
            sock.sendall(b'GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n')
            answer = sock.recv(64)
        seconds = time.monotonic() - started
    assert answer.startswith(b'HTTP/1.1 200'), answer
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--bodies', type=int, default=100)
    parser.add_argument('--body-mb', type=float, default=20.0)
    parser.add_argument('--half-open', type=int, default=300)
    parser.add_argument('--root', default=ROOT, help='checkout whose ding the worker runs')
    parser.add_argument('--tls', action='store_true', help='the worker serves HTTPS; every client speaks TLS')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as pki_dir:
        run(args, pki_dir)


def run(args: argparse.Namespace, pki_dir: str) -> None:
    global CLIENT_TLS
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.root), OMP_NUM_THREADS='1')
    if args.tls:
        sys.path.insert(0, ROOT)
        from tests.helpers.tls import make_pki  # deferred: only with --tls (the one way tests make certificates)

        pki = make_pki(pki_dir)
        env['BENCH_TLS'] = os.pathsep.join([pki.cert_file, pki.key_file, pki.ca_file])
        CLIENT_TLS = ssl.create_default_context(cafile=pki.ca_file)
    child = subprocess.Popen(
        [sys.executable, '-c', WORKER],
        cwd=os.path.abspath(args.root),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        port_s, timeout_s, cap_s = child.stdout.readline().split()
        port, read_timeout = int(port_s), float(timeout_s)
        time.sleep(0.5)
        before, _ = rss_mb(child.pid)
        t0 = time.monotonic()
        statuses = big_bodies(port, args.bodies, int(args.body_mb * 1024 * 1024))
        seconds = time.monotonic() - t0
        time.sleep(0.5)
        after, peak = rss_mb(child.pid)
        wait = (read_timeout or 30.0) + 5.0
        outcomes = half_open(port, args.half_open, wait, read_timeout or 30.0)
        time.sleep(1.0)  # the slots of (b) come back
        ping = ping_seconds(port)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    print(
        f'worker: LearnerSlave from {os.path.abspath(args.root)}; read timeout {timeout_s} s, max connections {cap_s}'
        + ('; HTTPS' if args.tls else '')
    )
    print(f'{"measure":<64} {"value":>14}')
    print('-' * 79)
    rows = [
        ('(a) RSS before, MB', f'{before:.1f}'),
        (f'(a) RSS after {args.bodies} x {args.body_mb:g} MB /connect bodies, MB', f'{after:.1f}'),
        ('(a) RSS growth, MB', f'{after - before:+.1f}'),
        ('(a) peak RSS (VmHWM), MB', f'{peak:.1f}'),
        ('(a) answers', ', '.join(f'{k} x{v}' for k, v in sorted(statuses.items()))),
        ('(a) seconds for all bodies', f'{seconds:.1f}'),
        (f'(b) {args.half_open} half-open: answered 503 and closed (n, max s)', '{} / {:.2f}'.format(*outcomes['503'])),
        ('(b) closed at once without answer (n, max s)', '{} / {:.2f}'.format(*outcomes['refused'])),
        ('(b) closed without answer, by the read timeout (n, max s)', '{} / {:.2f}'.format(*outcomes['closed'])),
        (f'(b) still open after {wait:g} s (n)', str(outcomes['open'][0])),
        ('(c) GET /ping while one connection is silent, s', f'{ping:.3f}'),
    ]
    for name, value in rows:
        print(f'{name:<64} {value:>14}')


if __name__ == '__main__':
    main()
