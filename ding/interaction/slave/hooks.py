"""What a ``Slave`` subclass overrides (``SlaveHooks``): the hooks around the master's connection, disconnection
and tasks, with their defaults, and ``_process_task``, which it must implement."""

from typing import Any


class SlaveHooks:
    """The hooks ``Slave`` calls; subclass ``Slave`` (not this) and override them."""

    def _before_connection(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """
        Called with the master's connection data before accepting it; the returned dict (JSON-serializable)
        is what ``conn.connect()`` returns on the master. Raise ``ConnectionRefuse`` to refuse.
        """
        return None

    def _after_connection(self, status_code: int, success: bool, code: int, message: str, data: dict[str, Any]) -> None:
        """Called after a connection request was accepted (``success``) or refused."""

    def _before_disconnection(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """Called before the master disconnects; raise ``DisconnectionRefuse`` to stay connected."""
        return None

    def _after_disconnection(
        self, status_code: int, success: bool, code: int, message: str, data: dict[str, Any]
    ) -> None:
        """Called after a disconnection request was accepted (``success``) or refused."""

    def _before_task(self, data: dict[str, Any]) -> None:
        """Called synchronously when a task arrives; raise ``TaskRefuse`` to refuse it (the answer is 403)."""

    def _process_task(self, task: dict[str, Any]) -> dict[str, Any] | None:
        """
        Run one task (in a worker thread) and return its result: a JSON-serializable dict. Raise ``TaskFail``
        to report failure; any other exception is reported as failure too, with its message.
        A task that blocks (waiting for data) should give up once ``self.is_running`` turns False:
        ``join()``/``close()`` wait for the running task.
        """
        raise NotImplementedError(f'{type(self).__name__} must implement _process_task')

    def _lost_connection(self, master_address: str, err: Exception) -> None:
        """Called when heartbeats to the master fail (it dropped this slave or cannot be reached)."""
