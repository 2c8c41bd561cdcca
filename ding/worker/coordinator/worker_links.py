"""The coordinator's connections to its workers: the interaction ``Master``, one link per configured learner
and collector (kept connected in the background), and single requests over those links."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from typing import Any

from ding.interaction import HttpLimits, Master, SlaveNotAuthenticated
from ding.interaction.exception import (
    SlaveMasterSecretNotGiven,
    SlaveMasterSecretNotMatch,
    SlaveSlaveAlreadyConnected,
)
from ding.interaction.master.task import TaskStatus
from ding.utils.tls import TlsSettings

from .resource_manager import NaiveResourceManager

WORKER_KINDS = ('learner', 'collector')
# Outcomes of one request to a worker (see WorkerLinks.request).
OK, CLOSING, LOST, FAILED = 'ok', 'closing', 'lost', 'failed'
# Answers to a connect that mean the worker's port is not ours to use: the worker is bound to another master,
# or what listens there does not share this run's secret (another run's worker, or a squatter).
SQUATTED_ERRORS = (
    SlaveSlaveAlreadyConnected,
    SlaveMasterSecretNotGiven,
    SlaveMasterSecretNotMatch,
    SlaveNotAuthenticated,
)


class WorkerLink:
    """One configured learner or collector: where it listens and its current connection (None if down)."""

    def __init__(self, kind: str, name: str, host: str, port: int) -> None:
        self.kind = kind
        self.name = name
        self.host = host
        self.port = int(port)
        self.conn: Any = None
        self.lost = False  # it was connected once and then lost
        self.last_error = ''
        self.failed_attempts = 0
        self.retry_at = 0.0  # no connection attempt before this time (after a loss)
        self.squatted = False  # its last connection attempt was refused as described by SQUATTED_ERRORS

    def __repr__(self) -> str:
        return f'{self.kind} {self.name} ({self.host}:{self.port})'


def parse_worker_entries(kind: str, entries: Any) -> dict[str, tuple[str, int]]:
    """``{name: [name, host, port]}`` (DI-engine) or ``{name: {host, port}}`` -> ``{name: (host, port)}``."""
    out: dict[str, tuple[str, int]] = {}
    for key, entry in (entries or {}).items():
        if isinstance(entry, (list, tuple)) and len(entry) == 3:
            name, host, port = entry
        elif isinstance(entry, dict) and 'host' in entry and 'port' in entry:
            name, host, port = key, entry['host'], entry['port']
        else:
            raise ValueError(
                f"coordinator config: {kind} '{key}' must be [name, host, port] or {{host, port}}, got {entry!r}"
            )
        if isinstance(port, bool) or not isinstance(port, int):
            raise ValueError(
                f"coordinator config: {kind} '{key}' port must be an int, got {port!r} "
                f"(run parallel_transform to fill 'auto' ports)"
            )
        out[str(name)] = (str(host), port)
    return out


class WorkerLinks:
    """Links to the workers of ``cfg.learner`` / ``cfg.collector`` (``{name: [name, host, port]}``).

    A background thread connects to every worker that is not connected (at start, and again after it was
    lost), asks for its resources and marks it idle in the resource manager. A worker is *lost* when the
    master drops it (no heartbeat for ``heartbeat_tolerance`` s), when one of its requests fails or exceeds
    the request timeout, or when the pipeline reports its process dead. ``on_change`` is called whenever a
    worker comes or goes; ``on_collector_gained`` / ``on_collector_lost`` when a collector comes back or goes.
    ``secret``: the run secret proven to each worker on connect (and required back). A worker whose connect
    answer says its port is held by someone else (``SQUATTED_ERRORS``) is reported at ERROR and through
    ``on_squatted(kind, name, reason)``, once until it connects again (the pipeline replaces it).
    """

    def __init__(
        self,
        cfg: dict[str, Any],
        logger: Any,
        on_change: Callable[[], None],
        on_collector_gained: Callable[[], None],
        on_collector_lost: Callable[[], None],
        secret: str | None = None,
        on_squatted: Callable[[str, str, str], None] | None = None,
        tls: TlsSettings | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        self._cfg = cfg
        self._secret = secret
        self._tls = tls
        self._limits = limits
        self._on_squatted = on_squatted
        self._logger = logger
        self._on_change = on_change
        self._on_collector_gained = on_collector_gained
        self._on_collector_lost = on_collector_lost
        self.closing = True  # every request returns CLOSING at once while set
        self._master: Any = None
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self.resource_manager = NaiveResourceManager()
        self._workers: dict[str, dict[str, WorkerLink]] = {k: {} for k in WORKER_KINDS}
        for kind in WORKER_KINDS:
            for name, (host, port) in parse_worker_entries(kind, cfg.get(kind, {})).items():
                self._workers[kind][name] = WorkerLink(kind, name, host, port)
        self._reconnect_interval = float(cfg.get('reconnect_interval', 0.5))
        self._connect_thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the master and the thread that connects to the workers (returns at once).

        A port the config compiler chose for ``port: 'auto'`` (``port_auto``) was only free when it was chosen;
        if something took it since, the master listens on another free one: slaves learn its address when
        it connects to them, so none of them needs the old one.
        """
        cfg = self._cfg
        self.closing = False
        port = int(cfg.get('port', 0))
        try:
            self._master = self._start_master(port)
        except OSError as err:
            if err.errno != errno.EADDRINUSE or not cfg.get('port_auto', False):
                raise
            self._master = self._start_master(0)
            self._logger.warning(
                f"[CommCoordinator] port {port} (chosen for port 'auto') was taken since the config was "
                f'compiled; listening on port {self._master.port} instead'
            )
        self._connect_thread = threading.Thread(target=self._connect_loop, name='coordinator_connect', daemon=True)
        self._connect_thread.start()
        self._logger.info(f'[CommCoordinator] master listening on {self._master.address}')

    def _start_master(self, port: int) -> Master:
        cfg = self._cfg
        master = Master(
            cfg.get('host', '127.0.0.1'),
            port,
            heartbeat_tolerance=float(cfg.get('heartbeat_tolerance', 15.0)),
            heartbeat_check_span=float(cfg.get('heartbeat_check_span', 0.5)),
            request_retries=int(cfg.get('request_retries', 1)),
            request_retry_waiting=float(cfg.get('request_retry_waiting', 0.2)),
            channel=int(cfg.get('channel', 0)),
            my_address=cfg.get('my_address', None),
            secret=self._secret,
            limits=self._limits,
            tls=self._tls,
        )
        master.start()
        return master

    def stop(self) -> None:
        """From now on every request returns at once (CLOSING) and no new connection is made."""
        self.closing = True
        self._wake.set()

    def join(self, timeout: float) -> None:
        if self._connect_thread is not None:
            self._connect_thread.join(timeout=timeout)

    def close_master(self) -> None:
        if self._master is not None:
            self._master.close()  # disconnects every slave (best effort) and fails what is still in flight

    @property
    def master(self) -> Any:
        return self._master

    def worker(self, kind: str, name: str) -> tuple[WorkerLink, Any]:
        """The link to ``name`` and its connection at this moment (None if it is down)."""
        with self._lock:
            link = self._workers[kind][name]
            return link, link.conn

    def connected_workers(self, kind: str) -> list[str]:
        with self._lock:
            return [n for n, w in self._workers[kind].items() if w.conn is not None]

    def wait_connected(self, timeout: float) -> bool:
        """Block until every configured worker is connected (True) or ``timeout`` passes (False)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self._lock:
                if all(w.conn is not None for ws in self._workers.values() for w in ws.values()):
                    return True
            time.sleep(0.05)
        return False

    # ---- connections -----------------------------------------------------------------------------
    def update_worker_address(self, kind: str, name: str, host: str, port: int) -> None:
        """Connect to ``name`` at a new address from now on (e.g. a restarted worker on another port)."""
        with self._lock:
            worker = self._workers[kind].get(name)
            if worker is None:
                worker = self._workers[kind][name] = WorkerLink(kind, name, host, port)
            worker.host, worker.port = host, int(port)
            worker.squatted = False  # a new address: report it again if someone holds that one too
        self.lose_worker(kind, name, 'the worker process exited')

    def _connect_loop(self) -> None:
        while not self.closing:
            with self._lock:
                workers = [w for ws in self._workers.values() for w in ws.values()]
            for worker in workers:
                if self.closing:
                    break
                conn = worker.conn
                if conn is not None and not conn.is_connected:
                    # The master dropped it (heartbeats stopped) while no task noticed.
                    self.lose_worker(worker.kind, worker.name, 'connection dropped by the master (no heartbeat)', conn)
                elif conn is None and time.time() >= worker.retry_at:
                    self._try_connect(worker)
            self._wake.wait(self._reconnect_interval)
            self._wake.clear()

    def _try_connect(self, worker: WorkerLink) -> bool:
        try:
            conn = self._master.new_connection(worker.name, worker.host, worker.port)
            conn.connect()
        except SQUATTED_ERRORS as exc:
            self._report_squatted(worker, exc)
            return False
        except Exception as exc:  # not up yet, or gone: the next round tries again
            worker.failed_attempts += 1
            if worker.failed_attempts == 1 or worker.failed_attempts % 60 == 0:
                self._logger.info(f'[CommCoordinator] cannot connect to {worker} yet: {exc}')
            worker.last_error = str(exc)
            return False
        task = conn.new_task({'name': 'resource'}, timeout=10.0).start().join()
        if task.status != TaskStatus.TASK_COMPLETED:
            self._logger.error(f'[CommCoordinator] {worker}: resource task failed: {task.result}')
            self._disconnect(conn)
            worker.retry_at = time.time() + self._reconnect_interval
            return False
        with self._lock:
            if self.closing:
                self._disconnect(conn)
                return False
            worker.conn = conn
            worker.failed_attempts = 0
            worker.squatted = False
            was_lost, worker.lost = worker.lost, False
        self.resource_manager.update(worker.kind, worker.name, dict(task.result or {}))
        self._logger.info(f'[CommCoordinator] connected to {worker}' + (' again' if was_lost else ''))
        if was_lost and worker.kind == 'collector':
            self._on_collector_gained()
        self._on_change()
        return True

    def _report_squatted(self, worker: WorkerLink, exc: Exception) -> None:
        worker.failed_attempts += 1
        worker.last_error = str(exc)
        worker.retry_at = time.time() + self._reconnect_interval
        if worker.squatted:
            return
        worker.squatted = True
        reason = f'{type(exc).__name__}: {exc}'
        self._logger.error(f'[CommCoordinator] {worker} is held by someone else, not this run ({reason})')
        if self._on_squatted is not None:
            self._on_squatted(worker.kind, worker.name, reason)

    def _disconnect(self, conn: Any) -> None:
        try:
            conn.disconnect()
        except Exception as exc:  # it refused or is unreachable: the master drops it locally anyway
            self._logger.info(f'[CommCoordinator] disconnect from {conn.name}: {exc}')

    def lose_worker(self, kind: str, name: str, reason: str, conn: Any = None) -> None:
        """Forget the worker's connection (only if it is still ``conn``, when given); its requests in flight
        fail, which wakes the threads running its tasks."""
        with self._lock:
            worker = self._workers[kind].get(name)
            if worker is None or worker.conn is None or (conn is not None and worker.conn is not conn):
                return
            conn, worker.conn = worker.conn, None
            worker.lost = True
            worker.retry_at = time.time() + self._reconnect_interval
        self.resource_manager.delete(kind, name)
        self._logger.error(f'[CommCoordinator] lost {worker}: {reason}')
        self._disconnect(conn)
        if kind == 'collector':
            self._on_collector_lost()
        self._wake.set()
        self._on_change()

    # ---- requests --------------------------------------------------------------------------------
    def request(
        self, worker: WorkerLink, conn: Any, data: dict[str, Any], timeout: float
    ) -> tuple[str, dict[str, Any]]:
        """Run one task on ``conn`` and classify the outcome.

        ``(OK, result)``; ``(CLOSING, {})`` when the coordinator closes meanwhile; ``(LOST, failure)`` when
        the worker could not be reached, was dropped (heartbeats) or did not answer within ``timeout``;
        ``(FAILED, failure)`` when the worker ran the task and reported a failure.
        """
        if conn is None or worker.conn is not conn:
            return LOST, {'message': f'{worker.name} is not connected'}
        started = time.monotonic()
        try:
            task = conn.new_task(data, timeout=timeout).start()
        except TypeError as exc:
            return FAILED, {'message': f'task data cannot be sent: {exc}'}
        while not task.is_done():
            if self.closing:
                return CLOSING, {}
            task.join(0.25)
        result = dict(task.result or {})
        if task.status == TaskStatus.TASK_COMPLETED:
            return OK, result
        result.setdefault('message', 'task failed')
        if task.error is not None or not conn.is_connected or time.monotonic() - started >= timeout:
            return LOST, result
        return FAILED, result

    def close_on_worker(
        self,
        worker: WorkerLink,
        conn: Any,
        name: str,
        task_id: str,
        timeout: float = 5.0,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send a close task; used at the normal end of a task, after a failed one and (shorter) at shutdown.
        ``extra``: more fields of its task_info (e.g. a data-parallel rank's ``stop_at_iter``)."""
        if conn is None or not conn.is_connected:
            return {}
        try:
            task_info = {'task_id': task_id, **(extra or {})}
            task = conn.new_task({'name': name, 'task_info': task_info}, timeout=timeout).start()
            task.join(timeout + 1.0)
        except Exception as exc:
            self._logger.info(f'[CommCoordinator] {name} for {task_id} on {worker.name}: {exc}')
            return {}
        return dict(task.result or {}) if task.status == TaskStatus.TASK_COMPLETED else {}
