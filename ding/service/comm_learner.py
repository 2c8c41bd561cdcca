"""The run service of a parallel learner process (``CommLearnerService``): attached to the comm learner from
above (``ding.entry.parallel_worker``) as a ``LearnerObserver``, so that ``ding.worker`` never imports
``ding.service``.

When a learner task's config enables the service (``task_info['service']``, the config's ``service``
section), the first learner built starts one ``ServiceRuntime`` for the process: ``/metrics``, ``/healthz``,
``/weights/*`` and ``/run/*`` on a free port (the configured port is the coordinator's), its address in
``./{exp_name}/run_{name}.json``. Each task's learner is attached to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ding.interaction.config import WILDCARD_HOSTS
from ding.utils.tls import TlsSettings
from ding.worker.learner.comm.base_comm_learner import BaseCommLearner, LearnerObserver

from . import service_section_enabled
from .runtime import ServiceRuntime
from .tunables import register_batch_size_attribute, register_loss_weights

_LOG = logging.getLogger('ding.service')


def _stop_learner(learner: Any) -> None:
    # Terminate from run control: the learner leaves its loop after this iteration (its final checkpoint,
    # written by the control's on_terminate, then holds it); the comm learner ends the task.
    learner.stop()


class CommLearnerService(LearnerObserver):
    """The run service of one comm learner process (``name``: the worker's name, ``exp_name``: the default
    experiment directory). ``log`` gets its one-line messages (default: the ``ding.service`` logger)."""

    def __init__(
        self,
        name: str,
        exp_name: str,
        log: Callable[[str], None] | None = None,
        tls: TlsSettings | None = None,
        worker_host: str | None = None,
        run_secret: str | None = None,
    ) -> None:
        self._name = name
        self._run_secret = run_secret  # signs the published weights (a key derived from it; never sent)
        # the worker's own address (its system entry's host): what other machines reach this learner by, handed
        # out with the weights' port when the service listens on every interface
        self._worker_host = worker_host
        self._service_host: str | None = None
        self._tls = tls  # the run's system.tls: this service then speaks HTTPS only
        self._exp_name = exp_name
        self._log = log or _LOG.info
        self._runtime: ServiceRuntime | None = None

    @property
    def runtime(self) -> ServiceRuntime | None:
        """The process's ``ServiceRuntime``, None until a task enabled it."""
        return self._runtime

    def learner_created(self, learner: Any, task_info: dict[str, Any]) -> None:
        section = task_info.get('service')
        if not isinstance(section, dict) or not service_section_enabled(section):
            return
        runtime = self._runtime
        if runtime is None:
            self._service_host = section.get('host')
            runtime = ServiceRuntime(
                dict(section, port=0),
                task_info.get('exp_name') or self._exp_name,
                instance=self._name,
                log=self._log,
                tls=self._tls,
                run_secret=self._run_secret,
            )
            self._runtime = runtime
        runtime.attach_learner(learner, control_hook=True, on_terminate=_stop_learner)
        # Tunes the coordinator forwards (it checked them against the config): loss weights the policy keeps,
        # and batch_size, the size get_data asks the coordinator for from the next demand on.
        register_loss_weights(runtime, learner.policy)
        register_batch_size_attribute(runtime, learner.policy)
        runtime.control.on_terminate = lambda: runtime.terminate_with_checkpoint(learner)
        runtime.start_server(run_file=f'run_{self._name}.json')

    def tune(self, tune: dict[str, Any]) -> None:
        # From the coordinator's run control; the learner's RunControlHook applies it between iterations.
        if self._runtime is not None:
            self._runtime.control.request_tune(tune, source='coordinator')

    @property
    def weights_address(self) -> str | None:
        runtime = self._runtime
        if runtime is None or runtime.server is None or runtime.weights is None:
            return None
        host = self._worker_host
        if self._service_host in WILDCARD_HOSTS and host and host not in WILDCARD_HOSTS:
            # the server's own address would be 127.0.0.1: right for this machine only
            return f'[{host}]:{runtime.server.port}' if ':' in host else f'{host}:{runtime.server.port}'
        return runtime.server.address

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.close()


def attach_comm_learner_service(comm: BaseCommLearner, log: Callable[[str], None] | None = None) -> CommLearnerService:
    """Give ``comm`` (a comm learner) the run service of its process; returns the observer added."""
    cfg = comm.cfg

    def log_to_comm(text: str) -> None:  # the comm learner's log once it started, else the service's
        logger = comm.logger
        (logger.info if logger is not None else _LOG.info)(text)

    service = CommLearnerService(
        cfg.get('name', 'learner0'),
        cfg.get('exp_name', 'default_experiment'),
        log=log or log_to_comm,
        tls=TlsSettings.from_config(cfg.get('tls')),  # system.tls, put in the worker's config by parallel_worker
        worker_host=cfg.get('host'),
        run_secret=cfg.get('secret'),  # set by parallel_worker from system.secret_file / $DING_RUN_SECRET
    )
    comm.add_learner_observer(service)
    return service


__all__ = ['CommLearnerService', 'attach_comm_learner_service']
