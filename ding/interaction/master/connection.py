"""The master's handle on one slave: connect, disconnect, send tasks."""

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import requests

from ..base.auth import AUTH_HEADER, check_accept_proof, connect_header
from ..base.client import HttpClient
from ..base.common import random_token
from ..exception import SlaveSlaveDisconnectionRefused, get_slave_exception_by_error
from .task import Task, TaskStatus

if TYPE_CHECKING:
    from .master import Master

logger = logging.getLogger(__name__)


class SlaveNotAuthenticated(Exception):
    """The process at the slave's address accepted a connection without proving the run secret: it is not a
    slave of this run (e.g. another program squatting the port)."""


class SlaveConnectionProxy:
    """
    Connection from a master to the slave at ``host:port``, registered in the master under ``name`` while
    connected. Use as a context manager (connect on enter, disconnect on exit) or call ``connect()`` and
    ``disconnect()``. Each ``connect()`` picks a fresh random token that the slave then requires.
    With a ``secret`` (the run secret), ``connect()`` proves it to the slave and requires the slave's proof back.
    """

    def __init__(self, master: 'Master', name: str, host: str, port: int, secret: str | None = None):
        self._master = master
        self._secret = secret
        self._name = name
        self._host = host
        self._port = port
        # Everything below is guarded by the master's lock (``master.lock``).
        self._connecting = False
        self._connected = False
        self._client: HttpClient | None = None
        self._master_token: str | None = None
        self._slave_token: str | None = None
        self._last_heartbeat = 0.0
        self._tasks: dict[str, Task] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def is_connected(self) -> bool:
        return self._connected

    @property
    def master_token(self) -> str | None:
        """Token this master sends to the slave on the current link (None when not connected)."""
        return self._master_token if self._connected else None

    @property
    def slave_token(self) -> str | None:
        """Token the slave sends back on the current link (None when not connected)."""
        return self._slave_token if self._connected else None

    @property
    def tasks(self) -> list[Task]:
        """Tasks sent on this connection that have not ended yet."""
        with self._master.lock:
            return list(self._tasks.values())

    # --- public -----------------------------------------------------------------------------------------
    def connect(self, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """
        Connect to the slave, sending ``data`` to its ``_before_connection``; returns that hook's dict.
        Raises the slave's error as an exception (e.g. ``SlaveSlaveConnectionRefused``,
        ``SlaveSlaveAlreadyConnected``, ``SlaveChannelNotMatch``) or ``requests.ConnectionError``.
        """
        master = self._master
        master.check_running()
        with master.lock:
            if self._connected or self._connecting:
                raise RuntimeError(f'connection {self._name!r} is already connected')
            master.begin_connect(self)
            self._connecting = True

        master_token = random_token()
        headers = {'Channel': str(master.channel), 'Token': master_token}
        client = self._client_with(headers)
        nonce = ''
        if self._secret is not None:
            headers[AUTH_HEADER], nonce = connect_header(self._secret, self._port)
        registered, authentic, reply = False, True, {}
        try:
            # The proof goes on /connect only (a fresh nonce each time), never on the link's later requests.
            reply = self._client_with(headers).request(
                'POST', '/connect', {'master': {'address': master.address}, 'data': dict(data or {})}
            )
            slave_token = reply.get('token')
            if self._secret is not None and isinstance(slave_token, str):
                authentic = check_accept_proof(self._secret, nonce, slave_token, reply.get('proof'))
            with master.lock:
                if authentic and isinstance(slave_token, str) and slave_token and master.is_running:
                    self._client, self._master_token, self._slave_token = client, master_token, slave_token
                    self._connected, self._last_heartbeat = True, time.monotonic()
                    master.add_connection(self, slave_token)
                    registered = True
        finally:
            with master.lock:
                self._connecting = False
                master.end_connect()
        if not authentic:
            raise SlaveNotAuthenticated(
                f'{self._host}:{self._port} (slave {self._name!r}) accepted the connection without proving the '
                f'run secret: it is not a slave of this run'
            )
        if not registered:
            # The slave accepted but we cannot keep the link: release the slave again.
            self._best_effort_disconnect(client)
            if not master.is_running:
                raise RuntimeError(f'master is shutting down; connection {self._name!r} was not kept')
            raise ValueError(f'slave {self._name!r} at {self._host}:{self._port} answered /connect without a token')
        logger.info('master connected to slave %r at %s:%s', self._name, self._host, self._port)
        out = reply.get('data')
        return out if isinstance(out, dict) else {}

    def disconnect(self, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """
        Disconnect from the slave (``data`` goes to its ``_before_disconnection``); returns that hook's dict.
        Tasks still in flight fail. Raises ``SlaveSlaveDisconnectionRefused`` (and stays connected) if the slave
        refuses; when the slave cannot be reached or has already dropped this master, the connection is
        dropped locally with a warning. No-op when not connected.
        """
        with self._master.lock:
            client = self._client if self._connected else None
        if client is None:
            return {}
        reply: dict[str, Any] = {}
        try:
            reply = client.request('DELETE', '/disconnect', {'data': dict(data or {})})
        except SlaveSlaveDisconnectionRefused:
            raise
        except requests.RequestException as err:
            logger.warning('slave %r did not acknowledge the disconnection (%s); dropping it anyway', self._name, err)
        self.drop(f'connection {self._name!r} was disconnected')
        out = reply.get('data')
        return out if isinstance(out, dict) else {}

    def new_task(self, data: Mapping[str, Any], timeout: float | None = None) -> Task:
        """
        A new task (not sent yet: call ``start()``) carrying ``data``, a JSON-serializable dict. With
        ``timeout`` (seconds from ``start()``), the task fails when the slave has not answered in time.
        """
        if not isinstance(data, Mapping):
            raise TypeError(f'task data must be a dict, got {type(data).__name__}')
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ValueError(f'task timeout must be a positive number of seconds or None, got {timeout!r}')
        return Task(self, dict(data), timeout=None if timeout is None else float(timeout))

    def ping(self, timeout: float = 2.0) -> bool:
        """Whether the slave's HTTP server answers ``GET /ping`` (needs no connection)."""
        client = HttpClient(
            self._host,
            self._port,
            {},
            get_slave_exception_by_error,
            retries=0,
            timeout=timeout,
            tls=self._master.tls_client_context,
        )
        try:
            client.request('GET', '/ping', idempotent=True)
        except requests.RequestException:
            return False
        return True

    def __enter__(self) -> 'SlaveConnectionProxy':
        self.connect()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.disconnect()

    def __repr__(self) -> str:
        return (
            f'SlaveConnectionProxy(name={self._name!r}, address={self._host}:{self._port}, connected={self._connected})'
        )

    # --- used by Task and Master of this package ----------------------------------------------------------
    def send_task(self, task: Task) -> None:
        """Hand ``task`` to the slave (``Task.start`` calls this); raises when it cannot be handed over."""
        with self._master.lock:
            if not self._connected or self._client is None:
                raise RuntimeError(f'connection {self._name!r} is not connected')
            if task.id in self._tasks:
                raise RuntimeError(f'task {task.id} was already sent on {self._name!r}')
            self._tasks[task.id] = task
            client = self._client
        try:
            client.request('POST', '/task/new', {'task': {'id': task.id}, 'data': task.data})
        except BaseException:
            self.pop_task(task.id)
            raise

    def pop_task(self, task_id: str) -> Task | None:
        """Take the task ``task_id`` off this connection (it has ended); None when it is not in flight."""
        with self._master.lock:
            return self._tasks.pop(task_id, None)

    def record_heartbeat(self) -> None:
        """The slave sent a heartbeat now."""
        with self._master.lock:
            self._last_heartbeat = time.monotonic()

    def heartbeat_age(self, now: float) -> float:
        """Seconds from the slave's last heartbeat (or the connection) to ``now`` (``time.monotonic()``)."""
        with self._master.lock:
            return now - self._last_heartbeat

    def expired_tasks(self, now: float) -> list[Task]:
        """Tasks in flight whose deadline is at or before ``now`` (``time.monotonic()``)."""
        with self._master.lock:
            return [t for t in self._tasks.values() if t.deadline is not None and now >= t.deadline]

    def drop(self, reason: str) -> bool:
        """Forget the connection locally and fail its tasks with ``reason``; False if it was not connected."""
        with self._master.lock:
            if not self._connected:
                return False
            self._connected = False
            self._master.remove_connection(self, self._slave_token)
            tasks = list(self._tasks.values())
            self._tasks.clear()
        for task in tasks:
            task.finish(TaskStatus.TASK_FAILED, {'message': f'{reason}; task {task.id} failed'})
        return True

    def close(self, reason: str) -> None:
        """Master shutdown: tell the slave once, then drop the connection whatever the answer."""
        with self._master.lock:
            client = self._client if self._connected else None
        if client is None:
            return
        self._best_effort_disconnect(client)
        self.drop(reason)

    # --- internals --------------------------------------------------------------------------------------
    def _client_with(self, headers: dict[str, str]) -> HttpClient:
        master = self._master
        return HttpClient(
            self._host,
            self._port,
            headers,
            get_slave_exception_by_error,
            retries=master.request_retries,
            retry_waiting=master.request_retry_waiting,
            timeout=master.request_timeout,
            tls=master.tls_client_context,
        )

    def _best_effort_disconnect(self, client: HttpClient) -> None:
        """One quick disconnection attempt whose failure is ignored (used when closing the master)."""
        try:
            client.request('DELETE', '/disconnect', {'data': {}}, retries=0, timeout=min(client.timeout, 3.0))
        except requests.RequestException as err:
            logger.debug('best-effort disconnection of %r failed: %s', self._name, err)
