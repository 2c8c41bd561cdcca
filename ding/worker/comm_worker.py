"""What the comm learner and the comm collector share (``SlaveHost``): the interaction slave a worker process
serves the coordinator with, its log, starting it (releasing what the worker acquired for it when the
start fails, e.g. a port already taken, so the parallel worker can retry elsewhere), its port and closing it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.interaction import CallbackSlave, HttpLimits
from ding.utils.log_helper import build_logger, close_logger
from ding.utils.tls import TlsSettings

# The slave's settings in a comm worker's config (``system.learner.<name>`` / ``system.collector.<name>``).
SLAVE_KEYS = ('heartbeat_span', 'request_retries', 'request_retry_waiting', 'request_timeout', 'channel')


class SlaveHost:
    """The slave and log of one comm worker. ``what`` names the worker in messages ('comm learner').

    ``start(slave_cls, callbacks, release)`` opens the log (``./{exp_name}/log/comm_{name}``), builds the
    slave on ``cfg.host`` / ``cfg.port`` and starts it; when that fails it calls ``release`` (what the worker
    acquired for serving), closes the log and re-raises. ``close()`` stops the slave and closes the log.
    """

    def __init__(self, cfg: EasyDict, what: str) -> None:
        self._cfg = cfg
        self._what = what
        self._slave: CallbackSlave | None = None
        self._logger: Any = None

    @property
    def logger(self) -> Any:
        """The worker's log (None before ``open_log`` / ``start`` and after ``close``)."""
        return self._logger

    @property
    def slave(self) -> CallbackSlave | None:
        return self._slave

    @property
    def port(self) -> int:
        """The port the slave listens on (the chosen one after ``start()`` with port 0)."""
        return self._slave.port if self._slave is not None else self._cfg.port

    def open_log(self) -> Any:
        """Open the worker's log (before ``start``: what the worker acquires may log)."""
        if self._slave is not None:
            raise RuntimeError(f'{self._what} {self._cfg.name}: start() was already called')
        if self._logger is None:
            cfg = self._cfg
            self._logger, _ = build_logger(f'./{cfg.exp_name}/log/comm_{cfg.name}', f'comm_{cfg.name}', need_tb=False)
        return self._logger

    def start(
        self,
        slave_cls: type[CallbackSlave],
        callbacks: dict[str, Callable[..., Any]],
        release: Callable[[], None] | None = None,
    ) -> CallbackSlave:
        """Start serving; returns once the slave listens. Raises at once when the port is taken."""
        cfg = self._cfg
        self.open_log()
        try:
            settings = {key: cfg[key] for key in SLAVE_KEYS}
            # The run secret, put there in memory only by the worker process (ding.entry.parallel_worker).
            slave = slave_cls(
                cfg.host,
                cfg.port,
                callbacks,
                secret=cfg.get('secret'),
                limits=HttpLimits.from_config(cfg.get('http')),  # system.http
                tls=TlsSettings.from_config(cfg.get('tls')),  # system.tls
                **settings,
            )
            slave.start()
        except BaseException:
            try:
                if release is not None:
                    release()
            finally:
                close_logger(self._logger)
                self._logger = None
            raise
        self._slave = slave
        self._logger.info(f'{self._what} {cfg.name} serving on {cfg.host}:{slave.port}')
        return slave

    def close_slave(self) -> None:
        """Stop the slave (the worker's tasks are stopped first); the log stays open for the rest of the close."""
        if self._slave is not None:
            self._slave.close()

    def close_log(self) -> None:
        if self._logger is not None:
            self._logger.info(f'{self._what} {self._cfg.name} closed')
            close_logger(self._logger)
            self._logger = None


__all__ = ['SlaveHost', 'SLAVE_KEYS']
