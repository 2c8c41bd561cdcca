"""Two "hosts" on this machine: two network namespaces joined by a veth pair, for multi-host tests.

Each namespace has its own loopback, its own ports and one address on a private /30; the only way between them
is the veth link, as between two machines on one switch. The file system is shared (it stands for the shared
directory of a real multi-host run). Creating namespaces needs root (CAP_NET_ADMIN) and ``ip`` (iproute2):
``namespaces_unavailable()`` says why they cannot be made here, for a skip.

    with two_hosts() as (host_a, host_b):
        server = host_b.start([sys.executable, '-m', 'http.server', '8000', '--bind', host_b.address], cwd=tmp)
        host_a.run(['curl', f'http://{host_b.address}:8000/'])

Leaving the ``with`` block (normally or by an exception) kills every process in both namespaces, those the
test started and their children alike, then deletes the namespaces (and with them the veth pair).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

IP = 'ip'
# 10.231.X.0/30 with X from the pid: two test runs at once get different names and subnets.
SUBNET_PREFIX = '10.231'
STOP_GRACE = 5.0


def namespaces_unavailable() -> str | None:
    """Why two namespaces cannot be created here (not root, no ``ip``, no kernel support), or None."""
    if shutil.which(IP) is None:
        return "no 'ip' command (iproute2)"
    if os.geteuid() != 0:
        return 'network namespaces need root (CAP_NET_ADMIN)'
    probe = f'dingprobe{os.getpid()}'
    made = subprocess.run([IP, 'netns', 'add', probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f'cannot create a network namespace: {made.stderr.strip()}'
    try:  # a veth pair inside the probe namespace (no veth module, no link): goes with the namespace
        link = subprocess.run(
            [IP, '-n', probe, 'link', 'add', 'probea', 'type', 'veth', 'peer', 'name', 'probeb'],
            capture_output=True,
            text=True,
        )
        return None if link.returncode == 0 else f'cannot create a veth pair: {link.stderr.strip()}'
    finally:
        subprocess.run([IP, 'netns', 'del', probe], capture_output=True)


@dataclass
class Host:
    """One namespace: its name, its address on the link, the link's interface name (for ``GLOO_SOCKET_IFNAME``),
    and the processes started in it."""

    namespace: str
    address: str
    interface: str
    processes: list[subprocess.Popen[Any]] = field(default_factory=list)

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` run inside this namespace."""
        return [IP, 'netns', 'exec', self.namespace, *args]

    def start(
        self,
        args: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: dict[str, str] | None = None,
        stdout: IO[Any] | int | None = subprocess.DEVNULL,
    ) -> subprocess.Popen[Any]:
        """Start ``args`` in this namespace (its own session: no terminal signal reaches it) with ``env`` and
        ``cwd``; stderr goes with stdout. ``ip netns exec`` execs the command, so the pid is the command's."""
        proc = subprocess.Popen(
            self.command(args),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(proc)
        return proc

    def run(self, args: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a short command in this namespace and return its result (output captured as text)."""
        return subprocess.run(self.command(args), capture_output=True, text=True, timeout=timeout)

    def pids(self) -> list[int]:
        """Every live process in this namespace (the ones started here and all their descendants)."""
        out = subprocess.run([IP, 'netns', 'pids', self.namespace], capture_output=True, text=True).stdout
        return [int(pid) for pid in out.split() if _alive(int(pid))]

    def kill_all(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM every process in the namespace, SIGKILL what is left after ``grace`` seconds, reap ours."""
        for pid in self.pids():
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.pids() and time.monotonic() < deadline:
            _reap(self.processes)
            time.sleep(0.05)
        for pid in self.pids():
            _signal(pid, signal.SIGKILL)
        for proc in self.processes:
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:  # a process stuck in the kernel: said, not hidden
                raise RuntimeError(f'pid {proc.pid} in namespace {self.namespace} survived SIGKILL') from None


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f'/proc/{pid}/stat', encoding='utf-8') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(processes: list[subprocess.Popen[Any]]) -> None:
    for proc in processes:
        proc.poll()


def _ip(*args: str) -> None:
    done = subprocess.run([IP, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"'ip {' '.join(args)}' failed: {done.stderr.strip()}")


@contextmanager
def two_hosts() -> Iterator[tuple[Host, Host]]:
    """Namespaces ``dingPIDa`` and ``dingPIDb`` joined by a veth pair on 10.231.X.0/30 (.1 and .2), ``lo`` up
    in both. No default route: a name lookup fails at once instead of waiting for a DNS server it cannot
    reach, and a server bound to a wildcard finds no outbound address (give it its address). Yields the two
    hosts; kills their processes and deletes the namespaces on the way out."""
    pid = os.getpid()
    subnet = f'{SUBNET_PREFIX}.{pid % 256}'
    # interface names are at most 15 characters
    host_a = Host(f'ding{pid}a', f'{subnet}.1', f'dv{pid}a')
    host_b = Host(f'ding{pid}b', f'{subnet}.2', f'dv{pid}b')
    made: list[Host] = []
    try:
        for host in (host_a, host_b):
            _ip('netns', 'add', host.namespace)
            made.append(host)
        # made inside the namespaces: nothing of the pair ever appears in the machine's own namespace
        _ip(
            '-n',
            host_a.namespace,
            'link',
            'add',
            host_a.interface,
            'type',
            'veth',
            'peer',
            'name',
            host_b.interface,
            'netns',
            host_b.namespace,
        )
        for host in (host_a, host_b):
            _ip('-n', host.namespace, 'addr', 'add', f'{host.address}/30', 'dev', host.interface)
            _ip('-n', host.namespace, 'link', 'set', host.interface, 'up')
            _ip('-n', host.namespace, 'link', 'set', 'lo', 'up')
        yield host_a, host_b
    finally:
        try:
            for host in made:
                host.kill_all()
        finally:
            for host in made:  # the veth pair goes with them
                subprocess.run([IP, 'netns', 'del', host.namespace], capture_output=True)
