"""Fixtures for the parallel tests: a coordinator driving real toy slaves (HTTP servers) in this process."""

import time
from collections.abc import Callable
from typing import Any

import pytest

from ding.config.parallel import compile_config_parallel
from ding.worker.coordinator.coordinator import Coordinator
from tests.helpers.toy_workers import ToyCollectorSlave, ToyLearnerSlave, toy_config


class ToyCluster:
    """A compiled toy config, its slaves (started on free ports) and the coordinator that drives them."""

    def __init__(self, cfg: Any, learners: list[ToyLearnerSlave], collectors: list[ToyCollectorSlave]) -> None:
        self.cfg = cfg
        self.learners = learners
        self.collectors = collectors
        self.coordinator = Coordinator(cfg)

    def run(self, timeout: float = 30.0) -> dict[str, Any]:
        """Start the coordinator, wait for the end of the run (or ``timeout``), close it; return its summary."""
        self.coordinator.start()
        deadline = time.time() + timeout
        while not self.coordinator.system_shutdown_flag and time.time() < deadline:
            time.sleep(0.05)
        self.coordinator.close()
        return self.coordinator.summary()


@pytest.fixture
def toy_cluster(tmp_path, monkeypatch) -> Callable[..., ToyCluster]:
    """``toy_cluster(learner_kwargs=[{}], collector_kwargs=[{}, {}], **toy_config_kwargs)``."""
    monkeypatch.chdir(tmp_path)
    slaves: list[Any] = []
    clusters: list[ToyCluster] = []

    def make(learner_kwargs=({},), collector_kwargs=({}, {}), **kwargs: Any) -> ToyCluster:
        main, create, system = toy_config(
            'toy', collector_num=len(collector_kwargs), learner_num=len(learner_kwargs), **kwargs
        )
        cfg = compile_config_parallel(main, create, system, seed=0)
        learners = [ToyLearnerSlave(**kw) for kw in learner_kwargs]
        collectors = [ToyCollectorSlave(**kw) for kw in collector_kwargs]
        for kind, group in (('learner', learners), ('collector', collectors)):
            for i, slave in enumerate(group):
                slave.start()
                slaves.append(slave)
                # The slave took a free port itself: point the coordinator there (no port race in tests).
                cfg.system.coordinator[kind][f'{kind}{i}'] = [f'{kind}{i}', '127.0.0.1', slave.port]
                cfg.system[kind][f'{kind}{i}'].port = slave.port
        cfg.system.coordinator.port = 0  # and the master takes one itself when it starts
        cluster = ToyCluster(cfg, learners, collectors)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.coordinator.close()
    for slave in slaves:
        slave.close()
